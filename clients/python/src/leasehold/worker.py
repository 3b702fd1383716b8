""":class:`Worker`: claims jobs of one queue and runs a handler under each lease, with
the safety loop of :class:`~leasehold.Lease`, until SIGTERM or SIGINT.

With an :class:`~leasehold.AsyncClient` the handler is a coroutine function and the
worker runs on asyncio (:meth:`Worker.run_async`, or :meth:`Worker.run`, which runs it
in a new event loop); the rules are the same.

On a signal the worker stops claiming; handlers that are running finish within their
leases (their keep-alive goes on, and ``lease.cancelled`` still fires at the deadline
as always); a lease granted after the signal is released unused. Then :meth:`run`
returns. Everything is logged on the ``leasehold.worker`` logger.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import re
import signal
import socket
import threading
from collections.abc import Awaitable, Callable
from types import FrameType
from typing import Any, cast

from . import _limits as lim
from .client import AsyncClient, Client
from .errors import InvalidArgument, LeaseholdError
from .lease import Lease

log = logging.getLogger("leasehold.worker")

#: A worker's default lease TTL (ms): long enough that a renew every 10 s rides out an
#: election, short enough that a crashed worker's job runs again within half a minute.
TTL_MS_DEFAULT = 30_000
#: How long one claim waits on the server for a job (ms): also how soon a stop request
#: is noticed by an idle worker thread.
POLL_MS = 1_000
#: After a failed claim (no node reachable…), wait this long before the next (seconds).
CLAIM_ERROR_PAUSE = 1.0

#: A handler of a :class:`~leasehold.Client`'s worker.
Handler = Callable[[Lease[threading.Event]], Any]
#: A handler of an :class:`~leasehold.AsyncClient`'s worker (a coroutine function).
AsyncHandler = Callable[[Lease[asyncio.Event]], Awaitable[Any]]


def default_owner() -> str:
    """``<host>-<pid>``, reduced to an owner's characters and length."""
    raw = f"{socket.gethostname()}-{os.getpid()}"
    return re.sub(r"[^A-Za-z0-9._\-:@]", "-", raw)[: lim.OWNER_LEN_MAX] or "worker"


class Worker:
    """Runs ``handler(lease)`` for every job claimed from ``queue``, ``concurrency`` at a
    time, each inside ``with lease:`` (normal return completes the job, with the
    handler's return value as the result unless it set ``lease.result``; an exception
    releases it as a failed attempt). The handler must watch ``lease.cancelled``.
    """

    def __init__(
        self, client: Client | AsyncClient, queue: str, handler: Handler | AsyncHandler, *,
        owner: str | None = None,
        concurrency: int = 1, ttl_ms: int = TTL_MS_DEFAULT, poll_ms: int = POLL_MS,
    ) -> None:
        if isinstance(client, AsyncClient) != inspect.iscoroutinefunction(handler):
            raise InvalidArgument("an AsyncClient's worker takes an `async def` handler, "
                                      "a Client's a plain function")
        self.client = client
        self.queue = lim.queue(queue)
        self.handler = handler
        self.owner = lim.owner(owner if owner is not None else default_owner())
        self.concurrency = lim.integer("concurrency", concurrency, 1, 1024)
        self.ttl_ms = lim.ttl_ms(ttl_ms)
        self.poll_ms = lim.integer("poll_ms", poll_ms, 0, lim.WAIT_MS_MAX)
        #: Set once the worker was asked to stop (signal or :meth:`stop`).
        self.stopping = threading.Event()
        #: Jobs completed, and handlers that raised, so far.
        self.completed = 0
        self.failed = 0
        self._count_lock = threading.Lock()

    def stop(self) -> None:
        """Stops claiming; :meth:`run` returns once running handlers have finished."""
        if not self.stopping.is_set():
            log.info("worker %s: stopping: no new claims, waiting for running handlers",
                     self.owner)
        self.stopping.set()

    def run(self) -> None:
        """Runs until :meth:`stop`, SIGTERM or SIGINT (handlers are installed when called
        from the main thread, and restored after). With an AsyncClient: runs
        :meth:`run_async` in a new event loop."""
        if isinstance(self.client, AsyncClient):
            asyncio.run(self.run_async())
            return
        restore = self._install_signals()
        threads = [threading.Thread(target=self._loop, name=f"leasehold-worker-{i}",
                                    daemon=True) for i in range(self.concurrency)]
        log.info("worker %s: queue %s, concurrency %d, ttl %d ms", self.owner, self.queue,
                 self.concurrency, self.ttl_ms)
        try:
            for t in threads:
                t.start()
            for t in threads:
                while t.is_alive():
                    t.join(timeout=0.5)  # short joins keep the main thread responsive
        finally:
            restore()
        log.info("worker %s: stopped (%d completed, %d failed)", self.owner,
                 self.completed, self.failed)

    def _install_signals(self) -> Callable[[], None]:
        if threading.current_thread() is not threading.main_thread():
            return lambda: None

        def on_signal(signum: int, frame: FrameType | None) -> None:
            log.info("worker %s: got %s", self.owner, signal.Signals(signum).name)
            self.stop()

        old = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}

        def restore() -> None:
            for s, h in old.items():
                signal.signal(s, h)

        return restore

    def _loop(self) -> None:
        client = cast(Client, self.client)
        while not self.stopping.is_set():
            try:
                lease = client.claim_next(self.queue, owner=self.owner,
                                               ttl_ms=self.ttl_ms, wait_ms=self.poll_ms)
            except LeaseholdError as e:
                log.warning("worker %s: claim failed: %s", self.owner, e)
                self.stopping.wait(CLAIM_ERROR_PAUSE)
                continue
            except Exception:  # a bug, not the cluster: keep the worker alive, loudly
                log.exception("worker %s: claim failed unexpectedly", self.owner)
                self.stopping.wait(CLAIM_ERROR_PAUSE)
                continue
            if lease is None:
                continue
            if self.stopping.is_set():
                self._give_back(lease)
                return
            self._run_one(lease)

    def _give_back(self, lease: Lease[threading.Event]) -> None:
        """A lease granted after the stop request: released unused (not an attempt)."""
        try:
            cast(Client, self.client).release(lease.job_id, owner=lease.owner,
                                              generation=lease.generation)
            log.info("worker %s: released %s/%d unused (stopping)", self.owner,
                     lease.job_id, lease.generation)
        except LeaseholdError as e:
            log.warning("worker %s: release of %s failed: %s", self.owner, lease.job_id, e)

    def _run_one(self, lease: Lease[threading.Event]) -> None:
        log.info("worker %s: running %s/%d (attempt %s)", self.owner, lease.job_id,
                 lease.generation, lease.attempts)
        try:
            with lease:
                out = cast(Handler, self.handler)(lease)
                if lease.result is None:
                    lease.result = out
        except Exception:
            self._failed(lease)
            return
        self._finished(lease)

    def _failed(self, lease: Lease[Any]) -> None:
        with self._count_lock:
            self.failed += 1
        log.exception("worker %s: %s/%d failed", self.owner, lease.job_id, lease.generation)

    def _finished(self, lease: Lease[Any]) -> None:
        with self._count_lock:
            self.completed += lease.cancel_reason is None
        log.info("worker %s: %s/%d %s", self.owner, lease.job_id, lease.generation,
                 "completed" if lease.cancel_reason is None
                 else f"stopped ({lease.cancel_reason})")

    # --- asyncio ---------------------------------------------------------------------

    async def run_async(self) -> None:
        """The worker on the running event loop (an AsyncClient's): ``concurrency``
        tasks, until :meth:`stop`, SIGTERM or SIGINT (loop signal handlers, installed
        when the loop runs in the main thread)."""
        client = self.client
        if not isinstance(client, AsyncClient):
            raise TypeError("run_async needs an AsyncClient; use run() with a Client")
        loop = asyncio.get_running_loop()
        signals = self._install_loop_signals(loop)
        log.info("worker %s: queue %s, concurrency %d, ttl %d ms (asyncio)", self.owner,
                 self.queue, self.concurrency, self.ttl_ms)
        try:
            await asyncio.gather(*(self._aloop(client) for _ in range(self.concurrency)))
        finally:
            for s in signals:
                loop.remove_signal_handler(s)
        log.info("worker %s: stopped (%d completed, %d failed)", self.owner,
                 self.completed, self.failed)

    def _install_loop_signals(self, loop: asyncio.AbstractEventLoop) -> list[int]:
        if threading.current_thread() is not threading.main_thread():
            return []
        sigs = [signal.SIGTERM, signal.SIGINT]
        for s in sigs:
            loop.add_signal_handler(s, self._on_loop_signal, s)
        return list(sigs)

    def _on_loop_signal(self, signum: int) -> None:
        log.info("worker %s: got %s", self.owner, signal.Signals(signum).name)
        self.stop()

    async def _aloop(self, client: AsyncClient) -> None:
        while not self.stopping.is_set():
            try:
                lease = await client.claim_next(self.queue, owner=self.owner,
                                                ttl_ms=self.ttl_ms, wait_ms=self.poll_ms)
            except LeaseholdError as e:
                log.warning("worker %s: claim failed: %s", self.owner, e)
                await asyncio.sleep(CLAIM_ERROR_PAUSE)
                continue
            except Exception:  # a bug, not the cluster: keep the worker alive, loudly
                log.exception("worker %s: claim failed unexpectedly", self.owner)
                await asyncio.sleep(CLAIM_ERROR_PAUSE)
                continue
            if lease is None:
                continue
            if self.stopping.is_set():
                await self._agive_back(client, lease)
                return
            await self._arun_one(lease)

    async def _agive_back(self, client: AsyncClient, lease: Lease[asyncio.Event]) -> None:
        try:
            await client.release(lease.job_id, owner=lease.owner, generation=lease.generation)
            log.info("worker %s: released %s/%d unused (stopping)", self.owner,
                     lease.job_id, lease.generation)
        except LeaseholdError as e:
            log.warning("worker %s: release of %s failed: %s", self.owner, lease.job_id, e)

    async def _arun_one(self, lease: Lease[asyncio.Event]) -> None:
        log.info("worker %s: running %s/%d (attempt %s)", self.owner, lease.job_id,
                 lease.generation, lease.attempts)
        try:
            async with lease:
                out = await cast(AsyncHandler, self.handler)(lease)
                if lease.result is None:
                    lease.result = out
        except Exception:
            self._failed(lease)
            return
        self._finished(lease)
