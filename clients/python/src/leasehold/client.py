""":class:`Client` and :class:`AsyncClient`: every api.md call as a method, keyword
arguments named as the JSON fields. Both build their calls with ``_calls`` and run them
through ``_transport``; they differ only in blocking or awaiting.

Behaviour as the Rust client's: rotation over the endpoints given (never addresses
learnt from ``/v1/cluster``), the leader hint, retries with jittered backoff honouring
``Retry-After``, one ``Idempotency-Key`` per logical call kept across its retries, a
bearer token, a CA file for ``https://`` endpoints.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

from . import _calls
from ._transport import (
    CONNECT_TIMEOUT,
    REQUEST_TIMEOUT,
    AsyncTransport,
    Core,
    SyncTransport,
)
from ._retry import MAX_ATTEMPTS
from .errors import InvalidArgument, ProtocolError
from .lease import DRIFT, MARGIN, Lease
from .models import ClusterStatus, Event, Job, JobPage

#: What ``from_env`` falls back to without ``LEASEHOLD_ENDPOINTS`` (the CLI's default).
DEFAULT_ENDPOINTS = "127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003"


def _endpoints(endpoints: str | Sequence[str]) -> list[str]:
    items = endpoints.split(",") if isinstance(endpoints, str) else list(endpoints)
    out = [_calls.normalize_endpoint(e) for e in items if e.strip()]
    if not out:
        raise InvalidArgument("at least one endpoint is needed")
    return out


def _check_config(
    endpoints: list[str], token: str | None, ca_file: str | None, drift: float,
    max_attempts: int,
) -> None:
    if token is not None and (not token or not all(0x21 <= ord(c) <= 0x7E for c in token)):
        raise InvalidArgument("the token must be non-empty visible ASCII without spaces")
    https = [e for e in endpoints if e.startswith("https://")]
    if https and ca_file is None:
        raise InvalidArgument(f"endpoint {https[0]} needs the CA that signs the nodes' "
                              "certificates (ca_file; the CLI's --tls-ca)")
    if not 0.0 <= drift < 1.0:
        raise InvalidArgument(f"drift must be in [0, 1) (got {drift})")
    if max_attempts < 1:
        raise InvalidArgument("max_attempts must be at least 1")


def _env() -> dict[str, Any]:
    return {
        "endpoints": os.environ.get("LEASEHOLD_ENDPOINTS") or DEFAULT_ENDPOINTS,
        "token": os.environ.get("LEASEHOLD_TOKEN") or None,
        "ca_file": os.environ.get("LEASEHOLD_TLS_CA") or None,
    }


class _Base:
    """Configuration both clients share."""

    def __init__(
        self,
        endpoints: str | Sequence[str],
        *,
        token: str | None = None,
        ca_file: str | None = None,
        timeout: float = REQUEST_TIMEOUT,
        connect_timeout: float = CONNECT_TIMEOUT,
        max_attempts: int = MAX_ATTEMPTS,
        drift: float = DRIFT,
        margin: float = MARGIN,
    ) -> None:
        eps = _endpoints(endpoints)
        _check_config(eps, token, ca_file, drift, max_attempts)
        #: The endpoints, normalized to ``http(s)://host:port``, in the order given.
        self.endpoints = eps
        self._request_timeout = timeout
        self._deadline_policy = (drift, margin)
        self._core = Core(eps, token=token, request_timeout=timeout,
                          connect_timeout=connect_timeout, max_attempts=max_attempts)
        self._ca_file = ca_file

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.endpoints!r})"


class Client(_Base):
    """A blocking Leasehold client; safe to share between threads.

    ``endpoints``: ``"host:port"``, a URL, a comma-separated string of them, or a list.
    ``token``: sent as ``Authorization: Bearer``; ``ca_file``: the CA (PEM) of
    ``https://`` endpoints; ``timeout``: seconds per attempt. ``drift`` and ``margin``
    (seconds) make the lease deadline conservative (defaults 1 % and 100 ms, as the Rust
    client). Use as a context manager, or call :meth:`close`.
    """

    def __init__(
        self,
        endpoints: str | Sequence[str],
        *,
        token: str | None = None,
        ca_file: str | None = None,
        timeout: float = REQUEST_TIMEOUT,
        connect_timeout: float = CONNECT_TIMEOUT,
        max_attempts: int = MAX_ATTEMPTS,
        drift: float = DRIFT,
        margin: float = MARGIN,
    ) -> None:
        super().__init__(endpoints, token=token, ca_file=ca_file, timeout=timeout,
                         connect_timeout=connect_timeout, max_attempts=max_attempts,
                         drift=drift, margin=margin)
        self._transport = SyncTransport(self._core, self._ca_file)

    @classmethod
    def from_env(cls, **kwargs: Any) -> Client:
        """A client from ``LEASEHOLD_ENDPOINTS`` (comma-separated), ``LEASEHOLD_TOKEN``
        and ``LEASEHOLD_TLS_CA``, as the CLI reads them; ``kwargs`` override."""
        return cls(**{**_env(), **kwargs})

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Closes the connections."""
        self._transport.close()

    def _lease(self, answer: Any) -> Lease[threading.Event]:
        wire = _calls.lease_wire(answer)
        if wire.get("attempts") is None:  # a cluster before 1.1: one read of the job
            job = self.get_job(wire["job_id"])
            wire = {**wire, "payload": job.payload, "attempts": job.attempts}
        return Lease(self, wire, answer.first_sent, threading.Event())

    # --- jobs ------------------------------------------------------------------------

    def submit(
        self, id: str | None = None, *, queue: str = "default", payload: Any = None,
        max_attempts: int | None = None, run_at_ms: int | None = None,
        priority: int | None = None, backoff_ms: int | None = None,
        backoff_ms_max: int | None = None, idempotency_key: str | None = None,
    ) -> Job:
        """``POST /v1/jobs`` → the new Job (an id is generated when ``id`` is None).
        ``idempotency_key``: your own key for this submit (a fresh one otherwise), so a
        submit retried by you after :class:`~leasehold.OutcomeUnknown` is applied once."""
        call = _calls.submit(
            id, queue=queue, payload=payload, max_attempts=max_attempts, run_at_ms=run_at_ms,
            priority=priority, backoff_ms=backoff_ms, backoff_ms_max=backoff_ms_max,
            idempotency_key=idempotency_key,
        )
        return _calls.job_of(self._transport.execute(call), 201)

    def get_job(self, id: str) -> Job:
        """``GET /v1/jobs/{id}`` (linearizable)."""
        return _calls.job_of(self._transport.execute(_calls.get_job(id)), 200)

    def list_jobs(
        self, *, queue: str | None = None, state: str | None = None,
        limit: int | None = None, page_token: str | None = None,
    ) -> JobPage:
        """One page of ``GET /v1/jobs`` (``limit`` ≤ 1000, the node's default 100)."""
        call = _calls.list_jobs(queue=queue, state=state, limit=limit, page_token=page_token)
        return _calls.page_of(self._transport.execute(call))

    def iter_jobs(
        self, *, queue: str | None = None, state: str | None = None,
        limit: int | None = None, page_token: str | None = None,
    ) -> Iterator[Job]:
        """Every job of every page from ``page_token`` on; ``limit`` is the page size.
        Each page is its own linearizable read: the whole is not one snapshot. The
        arguments are checked now, before anything is sent."""
        _calls.list_jobs(queue=queue, state=state, limit=limit, page_token=page_token)
        return self._pages(queue, state, limit, page_token)

    def _pages(
        self, queue: str | None, state: str | None, limit: int | None, page_token: str | None
    ) -> Iterator[Job]:
        seen: set[str] = set()
        while True:
            page = self.list_jobs(queue=queue, state=state, limit=limit, page_token=page_token)
            yield from page.jobs
            page_token = _next_token(page, seen)
            if page_token is None:
                return

    def delete_job(self, id: str) -> None:
        """``DELETE /v1/jobs/{id}``; :class:`~leasehold.LeaseHeld` while a live lease exists."""
        _calls.deleted(self._transport.execute(_calls.delete_job(id)))

    # --- leases ----------------------------------------------------------------------

    def claim(self, job_id: str, *, owner: str, ttl_ms: int) -> Lease[threading.Event]:
        """``POST /v1/jobs/{id}/claim`` → a :class:`~leasehold.Lease` (the job is created
        if absent), its local deadline counted from this call's first send."""
        call = _calls.claim(job_id, owner=owner, ttl_ms=ttl_ms)
        return self._lease(self._transport.execute(call))

    def claim_next(
        self, queue: str, *, owner: str, ttl_ms: int, wait_ms: int = 0
    ) -> Lease[threading.Event] | None:
        """``POST /v1/queues/{queue}/claim``: a lease on the next claimable job of
        ``queue``, waiting up to ``wait_ms`` (≤ 30,000) for one; ``None`` when none came.
        The wait is split into slices of at most ttl/4, each its own call."""
        _calls.check_claim_next(queue, owner=owner, ttl_ms=ttl_ms, wait_ms=wait_ms)
        until = time.monotonic() + wait_ms / 1000
        while True:
            left_ms = max(0, int((until - time.monotonic()) * 1000))
            wait = min(left_ms, _calls.claim_slice_ms(ttl_ms))
            call = _calls.claim_next_once(queue, owner=owner, ttl_ms=ttl_ms, wait_ms=wait)
            answer = self._transport.execute(call)
            if answer.status != 204:
                return self._lease(answer)
            if left_ms <= wait:
                return None

    def renew(
        self, job_id: str, *, owner: str, generation: int, ttl_ms: int | None = None,
        progress: Any = None,
    ) -> Lease[threading.Event]:
        """``POST /v1/jobs/{id}/renew`` → a new Lease record whose deadline counts from
        this call's first send (``ttl_ms`` defaults, on the store, to the claim's)."""
        call = _calls.renew(job_id, owner=owner, generation=generation, ttl_ms=ttl_ms,
                            progress=progress)
        return Lease(self, _calls.lease_wire(a := self._transport.execute(call)),
                     a.first_sent, threading.Event())

    def complete(self, job_id: str, *, owner: str, generation: int, result: Any = None) -> Job:
        """``POST /v1/jobs/{id}/complete`` → the completed Job."""
        call = _calls.complete(job_id, owner=owner, generation=generation, result=result)
        return _calls.job_of(self._transport.execute(call), 200)

    def release(
        self, job_id: str, *, owner: str, generation: int, retry: bool = False,
        delay_ms: int | None = None, error: str | None = None,
    ) -> Job:
        """``POST /v1/jobs/{id}/release`` → the Job, pending again (generation kept);
        ``retry=True`` counts it a failed attempt (the backoff applies)."""
        call = _calls.release(job_id, owner=owner, generation=generation, retry=retry,
                              delay_ms=delay_ms, error=error)
        return _calls.job_of(self._transport.execute(call), 200)

    def fail(self, job_id: str, *, owner: str, generation: int, error: str | None = None) -> Job:
        """``POST /v1/jobs/{id}/fail`` (1.1) → the Job, ``failed`` for good."""
        call = _calls.fail(job_id, owner=owner, generation=generation, error=error)
        return _calls.job_of(self._transport.execute(call), 200)

    def cancel(self, job_id: str, *, reason: str | None = None) -> Job:
        """``POST /v1/jobs/{id}/cancel`` (1.1): cancelled at once if pending; if leased,
        its holder hears ``cancel_requested`` within one renew interval."""
        return _calls.job_of(self._transport.execute(_calls.cancel(job_id, reason=reason)), 200)

    def retry(self, job_id: str, *, run_at_ms: int | None = None) -> Job:
        """``POST /v1/jobs/{id}/retry`` (1.1): a failed or cancelled job back to pending."""
        call = _calls.retry(job_id, run_at_ms=run_at_ms)
        return _calls.job_of(self._transport.execute(call), 200)

    def redrive(self, queue: str, *, limit: int | None = None) -> int:
        """``POST /v1/queues/{queue}/redrive`` (1.1): retries up to ``limit`` failed jobs;
        returns how many."""
        return _calls.redriven(self._transport.execute(_calls.redrive(queue, limit=limit)))

    # --- history, events, cluster ----------------------------------------------------

    def history(self, job_id: str) -> list[Event]:
        """``GET /v1/jobs/{id}/history`` (1.1): the job's last 100 events, oldest first."""
        return _calls.history_of(self._transport.execute(_calls.history(job_id)))

    def events(
        self, *, after: int = 0, queue: str | None = None, job_id: str | None = None,
        limit: int | None = None, wait_ms: int = _calls.EVENTS_WAIT_MS_DEFAULT,
        follow: bool = True,
    ) -> Iterator[Event]:
        """``GET /v1/events`` (1.1) as an iterator that follows the feed from ``after``:
        each poll waits up to ``wait_ms`` on the server. With ``follow=False`` it ends
        at the first empty page. The arguments are checked now, before anything is sent."""
        _calls.events(after=after, queue=queue, job_id=job_id, limit=limit, wait_ms=wait_ms)
        return self._follow(after, queue, job_id, limit, wait_ms if follow else 0, follow)

    def _follow(
        self, after: int, queue: str | None, job_id: str | None, limit: int | None,
        wait_ms: int, follow: bool,
    ) -> Iterator[Event]:
        while True:
            call = _calls.events(after=after, queue=queue, job_id=job_id, limit=limit,
                                 wait_ms=wait_ms)
            evs, after = _calls.events_of(self._transport.execute(call))
            yield from evs
            if not evs and not follow:
                return

    def cluster_status(self) -> ClusterStatus:
        """``GET /v1/cluster`` from whichever node answers first."""
        return _calls.cluster_of(self._transport.execute(_calls.cluster_status()))


def _next_token(page: JobPage, seen: set[str]) -> str | None:
    token = page.next_page_token
    if token is not None:
        # A node that hands out the same token twice would loop us forever.
        if token in seen:
            raise ProtocolError(f"page token {token!r} repeated", status=200)
        seen.add(token)
    return token


class AsyncClient(_Base):
    """The asyncio Leasehold client: the same methods as :class:`Client`, ``async``;
    leases are entered with ``async with`` and their ``cancelled`` is an
    ``asyncio.Event``. Use as an async context manager, or await :meth:`aclose`."""

    def __init__(
        self,
        endpoints: str | Sequence[str],
        *,
        token: str | None = None,
        ca_file: str | None = None,
        timeout: float = REQUEST_TIMEOUT,
        connect_timeout: float = CONNECT_TIMEOUT,
        max_attempts: int = MAX_ATTEMPTS,
        drift: float = DRIFT,
        margin: float = MARGIN,
    ) -> None:
        super().__init__(endpoints, token=token, ca_file=ca_file, timeout=timeout,
                         connect_timeout=connect_timeout, max_attempts=max_attempts,
                         drift=drift, margin=margin)
        self._transport = AsyncTransport(self._core, self._ca_file)

    @classmethod
    def from_env(cls, **kwargs: Any) -> AsyncClient:
        """A client from ``LEASEHOLD_ENDPOINTS``, ``LEASEHOLD_TOKEN``, ``LEASEHOLD_TLS_CA``."""
        return cls(**{**_env(), **kwargs})

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Closes the connections."""
        await self._transport.aclose()

    async def _lease(self, answer: Any) -> Lease[asyncio.Event]:
        wire = _calls.lease_wire(answer)
        if wire.get("attempts") is None:  # a cluster before 1.1: one read of the job
            job = await self.get_job(wire["job_id"])
            wire = {**wire, "payload": job.payload, "attempts": job.attempts}
        return Lease(self, wire, answer.first_sent, asyncio.Event())

    async def submit(
        self, id: str | None = None, *, queue: str = "default", payload: Any = None,
        max_attempts: int | None = None, run_at_ms: int | None = None,
        priority: int | None = None, backoff_ms: int | None = None,
        backoff_ms_max: int | None = None, idempotency_key: str | None = None,
    ) -> Job:
        """``POST /v1/jobs`` → the new Job (see :meth:`Client.submit`)."""
        call = _calls.submit(
            id, queue=queue, payload=payload, max_attempts=max_attempts, run_at_ms=run_at_ms,
            priority=priority, backoff_ms=backoff_ms, backoff_ms_max=backoff_ms_max,
            idempotency_key=idempotency_key,
        )
        return _calls.job_of(await self._transport.execute(call), 201)

    async def get_job(self, id: str) -> Job:
        """``GET /v1/jobs/{id}`` (linearizable)."""
        return _calls.job_of(await self._transport.execute(_calls.get_job(id)), 200)

    async def list_jobs(
        self, *, queue: str | None = None, state: str | None = None,
        limit: int | None = None, page_token: str | None = None,
    ) -> JobPage:
        """One page of ``GET /v1/jobs``."""
        call = _calls.list_jobs(queue=queue, state=state, limit=limit, page_token=page_token)
        return _calls.page_of(await self._transport.execute(call))

    def iter_jobs(
        self, *, queue: str | None = None, state: str | None = None,
        limit: int | None = None, page_token: str | None = None,
    ) -> AsyncIterator[Job]:
        """Every job of every page (``async for``); ``limit`` is the page size. The
        arguments are checked now, before anything is sent."""
        _calls.list_jobs(queue=queue, state=state, limit=limit, page_token=page_token)
        return self._pages(queue, state, limit, page_token)

    async def _pages(
        self, queue: str | None, state: str | None, limit: int | None, page_token: str | None
    ) -> AsyncIterator[Job]:
        seen: set[str] = set()
        while True:
            page = await self.list_jobs(queue=queue, state=state, limit=limit,
                                        page_token=page_token)
            for job in page.jobs:
                yield job
            page_token = _next_token(page, seen)
            if page_token is None:
                return

    async def delete_job(self, id: str) -> None:
        """``DELETE /v1/jobs/{id}``."""
        _calls.deleted(await self._transport.execute(_calls.delete_job(id)))

    async def claim(self, job_id: str, *, owner: str, ttl_ms: int) -> Lease[asyncio.Event]:
        """``POST /v1/jobs/{id}/claim`` → a Lease (``async with lease:``)."""
        call = _calls.claim(job_id, owner=owner, ttl_ms=ttl_ms)
        return await self._lease(await self._transport.execute(call))

    async def claim_next(
        self, queue: str, *, owner: str, ttl_ms: int, wait_ms: int = 0
    ) -> Lease[asyncio.Event] | None:
        """``POST /v1/queues/{queue}/claim``, waiting up to ``wait_ms`` in ttl/4 slices."""
        _calls.check_claim_next(queue, owner=owner, ttl_ms=ttl_ms, wait_ms=wait_ms)
        until = time.monotonic() + wait_ms / 1000
        while True:
            left_ms = max(0, int((until - time.monotonic()) * 1000))
            wait = min(left_ms, _calls.claim_slice_ms(ttl_ms))
            call = _calls.claim_next_once(queue, owner=owner, ttl_ms=ttl_ms, wait_ms=wait)
            answer = await self._transport.execute(call)
            if answer.status != 204:
                return await self._lease(answer)
            if left_ms <= wait:
                return None

    async def renew(
        self, job_id: str, *, owner: str, generation: int, ttl_ms: int | None = None,
        progress: Any = None,
    ) -> Lease[asyncio.Event]:
        """``POST /v1/jobs/{id}/renew`` → a new Lease record."""
        call = _calls.renew(job_id, owner=owner, generation=generation, ttl_ms=ttl_ms,
                            progress=progress)
        a = await self._transport.execute(call)
        return Lease(self, _calls.lease_wire(a), a.first_sent, asyncio.Event())

    async def complete(
        self, job_id: str, *, owner: str, generation: int, result: Any = None
    ) -> Job:
        """``POST /v1/jobs/{id}/complete`` → the completed Job."""
        call = _calls.complete(job_id, owner=owner, generation=generation, result=result)
        return _calls.job_of(await self._transport.execute(call), 200)

    async def release(
        self, job_id: str, *, owner: str, generation: int, retry: bool = False,
        delay_ms: int | None = None, error: str | None = None,
    ) -> Job:
        """``POST /v1/jobs/{id}/release`` → the Job."""
        call = _calls.release(job_id, owner=owner, generation=generation, retry=retry,
                              delay_ms=delay_ms, error=error)
        return _calls.job_of(await self._transport.execute(call), 200)

    async def fail(
        self, job_id: str, *, owner: str, generation: int, error: str | None = None
    ) -> Job:
        """``POST /v1/jobs/{id}/fail`` (1.1)."""
        call = _calls.fail(job_id, owner=owner, generation=generation, error=error)
        return _calls.job_of(await self._transport.execute(call), 200)

    async def cancel(self, job_id: str, *, reason: str | None = None) -> Job:
        """``POST /v1/jobs/{id}/cancel`` (1.1)."""
        call = _calls.cancel(job_id, reason=reason)
        return _calls.job_of(await self._transport.execute(call), 200)

    async def retry(self, job_id: str, *, run_at_ms: int | None = None) -> Job:
        """``POST /v1/jobs/{id}/retry`` (1.1)."""
        call = _calls.retry(job_id, run_at_ms=run_at_ms)
        return _calls.job_of(await self._transport.execute(call), 200)

    async def redrive(self, queue: str, *, limit: int | None = None) -> int:
        """``POST /v1/queues/{queue}/redrive`` (1.1) → how many were retried."""
        call = _calls.redrive(queue, limit=limit)
        return _calls.redriven(await self._transport.execute(call))

    async def history(self, job_id: str) -> list[Event]:
        """``GET /v1/jobs/{id}/history`` (1.1)."""
        return _calls.history_of(await self._transport.execute(_calls.history(job_id)))

    def events(
        self, *, after: int = 0, queue: str | None = None, job_id: str | None = None,
        limit: int | None = None, wait_ms: int = _calls.EVENTS_WAIT_MS_DEFAULT,
        follow: bool = True,
    ) -> AsyncIterator[Event]:
        """``GET /v1/events`` (1.1) as an async iterator following the feed (see
        :meth:`Client.events`)."""
        _calls.events(after=after, queue=queue, job_id=job_id, limit=limit, wait_ms=wait_ms)
        return self._follow(after, queue, job_id, limit, wait_ms if follow else 0, follow)

    async def _follow(
        self, after: int, queue: str | None, job_id: str | None, limit: int | None,
        wait_ms: int, follow: bool,
    ) -> AsyncIterator[Event]:
        while True:
            call = _calls.events(after=after, queue=queue, job_id=job_id, limit=limit,
                                 wait_ms=wait_ms)
            evs, after = _calls.events_of(await self._transport.execute(call))
            for ev in evs:
                yield ev
            if not evs and not follow:
                return

    async def cluster_status(self) -> ClusterStatus:
        """``GET /v1/cluster``."""
        return _calls.cluster_of(await self._transport.execute(_calls.cluster_status()))
