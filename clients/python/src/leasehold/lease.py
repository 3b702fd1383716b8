"""The safety loop: :class:`Lease`, a held lease as a (async) context manager that keeps
itself alive in the background and says when the work must stop.

The local deadline is on ``time.monotonic()`` and counts from the FIRST send of the claim
or renew that granted the lease's current term (a retry under the same
``Idempotency-Key`` keeps it, since the store may have applied the first attempt)::

    deadline = sent + ttl × (1 − drift) − margin        (drift 1 %, margin 100 ms)

The store stamps the entry no earlier than ``sent``, so its expiry ``stamp + ttl`` is
never before ``sent + ttl``: the deadline comes first. While the block runs, a keep-alive
renews every ttl/3 (carrying the latest ``lease.progress``); each success moves the
deadline, computed from that renew's own first send. ``lease.cancelled`` is set, with
``cancel_reason``:

- ``"deadline"``: no renew has succeeded by ``deadline − cleanup window`` (the window is
  ``min(ttl/10, 5 s)``, as the Rust client's work signal), so the work can still stop
  cleanly while the lease holds; set by a watcher that does not wait for a renew in
  flight, so it comes on time even when every node is frozen;
- ``"lost"``: the store refused a renew (``stale_lease``, ``lease_expired``…);
- ``"cancelled"``: a renew answered ``cancel_requested`` (someone cancelled the job).

**Cancellation is final.** Once ``cancelled`` is set the keep-alive sends no further
renew and the deadline no longer moves: a lease won back after the worker was told to
stop is no use to anyone. (The Rust client's keep-alive goes on renewing for a while
after its deadline to report a "recovered" lease, and renews on after
``cancel_requested``; its work is not resumed either way. This client does not renew at
all once cancelled, so with ``"cancelled"`` the block has until ``lease.deadline`` to
wind down; the exit then releases the job, which ends ``cancelled``.)

Leaving the block normally completes the job with ``lease.result``; leaving it by an
exception releases it (``retry=True``, the exception as ``error``) and re-raises. After
a cancellation the job is never completed: the exit releases it if the lease is still
ours by our own reckoning (not ``"lost"``, deadline ahead), else sends nothing.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any, Generic, Protocol, TypeVar

from . import _calls
from . import _limits as lim
from ._transport import Answer, AsyncTransport, Call, SyncTransport
from .errors import (
    LEASE_GONE_CODES,
    IdempotencyFull,
    LeaseholdError,
    OutcomeUnknown,
    ProtocolError,
    Unavailable,
)
from .models import Job

log = logging.getLogger("leasehold.lease")

#: Fraction of a TTL assumed lost to clock-rate difference (the Rust client's default).
DRIFT = 0.01
#: Seconds kept in reserve to stop the work (the Rust client's default).
MARGIN = 0.100
#: Shortest per-attempt timeout of a background renew (seconds): below this even a
#: loopback request under load times out spuriously.
RENEW_ATTEMPT_TIMEOUT_MIN = 0.100
#: Pause between two failed renew rounds (seconds), so a dead cluster is not hammered.
RENEW_ROUND_PAUSE = 0.050
#: How long the exit tries to hand back a cancelled lease still held (seconds, per
#: attempt and for starting attempts): a lease not released runs out on its own.
RELEASE_AFTER_CANCEL_WAIT = 0.500
#: The cleanup window's cap (seconds): a cleanup (abort a request, flush, roll back) takes
#: well under this; the window is min(ttl/10, this), never more than ttl/3.
CLEANUP_WINDOW_MAX = 5.0

#: Reasons of ``Lease.cancel_reason``.
LOST, CANCELLED, DEADLINE = "lost", "cancelled", "deadline"

E = TypeVar("E", threading.Event, asyncio.Event)


def usable_seconds(ttl_ms: int, drift: float = DRIFT, margin: float = MARGIN) -> float:
    """``ttl × (1 − drift) − margin`` in seconds, at least zero: how long after the send
    a lease of ``ttl_ms`` may be used."""
    return max(0.0, ttl_ms / 1000 * (1 - drift) - margin)


def cleanup_window(ttl_ms: int) -> float:
    """How long before the deadline the work is told to stop when no renew succeeded:
    ``min(ttl/10, 5 s)`` (about a third of a renew interval: the renews have then been
    failing for most of two intervals), never more than ttl/3."""
    ttl = ttl_ms / 1000
    return min(ttl / 10, CLEANUP_WINDOW_MAX, ttl / 3)


def _error_text(exc: BaseException) -> str:
    """The exception as a release's ``error``, cut to api.md's 4 KiB."""
    text = f"{type(exc).__name__}: {exc}"
    return text.encode()[: lim.ERROR_BYTES_MAX].decode(errors="ignore")


class _LeaseClient(Protocol):
    """What a lease reads of the :class:`~leasehold.Client` or
    :class:`~leasehold.AsyncClient` that made it. A protocol, so that this module does not
    import ``client.py``, which imports it (no import circle: tests/test_layout.py)."""

    @property
    def _transport(self) -> SyncTransport | AsyncTransport: ...

    @property
    def _deadline_policy(self) -> tuple[float, float]: ...

    @property
    def _request_timeout(self) -> float: ...


class Lease(Generic[E]):
    """A lease on one job at one generation (api.md's Lease, as attributes), and the
    safety loop around the work done under it (see the module's documentation).

    ``with lease:`` for a lease of a :class:`~leasehold.Client` (``cancelled`` is a
    ``threading.Event``), ``async with lease:`` for one of an
    :class:`~leasehold.AsyncClient` (``cancelled`` is an ``asyncio.Event``). A lease is
    entered at most once. Outside a block it is a plain record: nothing renews it.
    """

    def __init__(
        self, client: _LeaseClient, wire: dict[str, Any], first_sent: float, cancelled: E
    ) -> None:
        self._client: _LeaseClient = client
        self._lock: threading.Lock = threading.Lock()
        #: The job this lease is on.
        self.job_id: str = wire["job_id"]
        #: Who holds it.
        self.owner: str = wire["owner"]
        #: The fencing token: per job it only grows. Send it with every external write.
        self.generation: int = wire["generation"]
        #: The job's payload, as the claim answered it (1.1).
        self.payload: Any = wire.get("payload")
        #: The job's attempts, this one included, as the claim answered it (1.1).
        self.attempts: int | None = wire.get("attempts")
        #: The checkpoint an earlier attempt left (the claim's ``progress``), and the
        #: generation it was recorded under: resume from it.
        self.checkpoint: Any = wire.get("progress")
        self.progress_generation: int | None = wire.get("progress_generation")
        #: Set by the block: the ``result`` the exit completes the job with.
        self.result: Any = None
        #: Set when the work must stop (see ``cancel_reason``); never cleared.
        self.cancelled: E = cancelled
        #: ``"lost"``, ``"cancelled"`` or ``"deadline"`` once ``cancelled`` is set.
        self.cancel_reason: str | None = None
        #: The error the store refused a renew with (reason ``"lost"``).
        self.cancel_error: LeaseholdError | None = None
        #: The job as the exit's complete or release answered it.
        self.job: Job | None = None
        self._progress: Any = self.checkpoint
        self._progress_version: int = 0
        self._progress_sent_version: int = 0
        self._entered: bool = False
        transport = client._transport
        self._sync = transport if isinstance(transport, SyncTransport) else None
        self._async = transport if isinstance(transport, AsyncTransport) else None
        self._keeper: _ThreadKeeper | _TaskKeeper | None = None
        self._set_term(wire, first_sent)

    # --- what the store granted -----------------------------------------------------

    def _set_term(self, wire: dict[str, Any], sent: float) -> None:
        self.ttl_ms: int = wire["ttl_ms"]
        #: Store expiry (cluster time) of the latest claim or renew.
        self.lease_until_ms: int | None = wire.get("lease_until_ms")
        self.cluster_time_ms: int | None = wire.get("cluster_time_ms")
        self.log_index: int | None = wire.get("log_index")
        #: Whether the store said the job's cancellation was requested (1.1).
        self.cancel_requested: bool = bool(wire.get("cancel_requested", False))
        #: When the call that granted the current term was first sent (monotonic).
        self.sent_at: float = sent
        drift, margin = self._client._deadline_policy
        self._deadline = sent + usable_seconds(self.ttl_ms, drift, margin)

    @property
    def token(self) -> int:
        """The fencing token (= ``generation``): attach it to every external write."""
        return self.generation

    @property
    def deadline(self) -> float:
        """The local deadline on ``time.monotonic()``: stop producing effects under this
        lease by then. Moves later with each successful renew, never after ``cancelled``."""
        return self._deadline

    @property
    def renew_every(self) -> float:
        """Seconds between renews: ttl/3, so two more tries fit if one fails."""
        return self.ttl_ms / 3000

    @property
    def stop_at(self) -> float:
        """When ``cancelled`` is set (reason ``"deadline"``) if no renew succeeds before:
        ``deadline − cleanup window`` (monotonic)."""
        return self._deadline - cleanup_window(self.ttl_ms)

    def remaining(self) -> float:
        """Seconds left before the local deadline (zero once it has passed)."""
        return max(0.0, self._deadline - time.monotonic())

    def is_live(self) -> bool:
        """Not cancelled and the local deadline still ahead."""
        return not self.cancelled.is_set() and time.monotonic() < self._deadline

    @property
    def progress(self) -> Any:
        """The checkpoint the keep-alive sends with its next renew (any JSON value of at
        most 16 KiB); starts as the claim's ``checkpoint``. Assign to update it."""
        return self._progress

    @progress.setter
    def progress(self, value: Any) -> None:
        if value is not None:
            lim.json_value("progress", value, lim.PROGRESS_BYTES_MAX)
        with self._lock:
            self._progress = value
            self._progress_version += 1

    def __repr__(self) -> str:
        return (
            f"Lease(job_id={self.job_id!r}, owner={self.owner!r}, generation={self.generation}, "
            f"ttl_ms={self.ttl_ms}, remaining={self.remaining():.3f}s, "
            f"cancel_reason={self.cancel_reason!r})"
        )

    # --- the keep-alive's steps (shared by both keepers) ----------------------------

    def _fire(self, reason: str, error: LeaseholdError | None = None) -> None:
        """Records why, THEN sets ``cancelled``: whoever wakes reads a reason that says
        so. The first reason wins; the keep-alive stops for good."""
        with self._lock:
            if self.cancel_reason is not None:
                return
            self.cancel_reason = reason
            self.cancel_error = error
        log.info("lease %s/%d cancelled: %s%s", self.job_id, self.generation, reason,
                 f" ({error})" if error else "")
        self.cancelled.set()
        if self._keeper is not None:
            self._keeper.wake()

    def _renew_call(self) -> tuple[Call, int]:
        """The next renew round's call (the latest progress, if not yet stored), and the
        progress version it carries. An attempt may take at most one renew interval
        (a frozen node must not hold the round), and so may the round."""
        with self._lock:
            version = self._progress_version
            dirty = version != self._progress_sent_version
            progress = self._progress if dirty else None
        call = _calls.renew(self.job_id, owner=self.owner, generation=self.generation,
                            ttl_ms=self.ttl_ms, progress=progress)
        every = self.renew_every
        timeout = self._client._request_timeout
        call.attempt_timeout = min(max(every, RENEW_ATTEMPT_TIMEOUT_MIN),
                                   max(timeout, RENEW_ATTEMPT_TIMEOUT_MIN))
        call.budget = every
        return call, version

    def _renewed(self, answer: Answer, version: int) -> None:
        """Applies a renew's answer, unless cancellation came first (it is final)."""
        wire = _calls.lease_wire(answer)
        if wire["generation"] != self.generation or wire["owner"] != self.owner:
            raise ProtocolError(f"renew of generation {self.generation} by {self.owner} "
                                f"answered {wire['generation']} by {wire['owner']}")
        with self._lock:
            if self.cancel_reason is not None:
                return
            self._progress_sent_version = max(self._progress_sent_version, version)
            self._set_term(wire, answer.first_sent)
        if self.cancel_requested:
            self._fire(CANCELLED)

    def _renew_failed(self, e: LeaseholdError) -> bool:
        """Judges a failed round: True when the lease is gone (fired ``"lost"``); False
        for unavailability, an unknown outcome, a garbled answer, or this token's full share
        of remembered replies (nothing applied; a fresh round soon)."""
        if isinstance(e, (Unavailable, OutcomeUnknown, ProtocolError, IdempotencyFull)):
            log.debug("renew of %s/%d failed, retrying: %s", self.job_id, self.generation, e)
            return False
        self._fire(LOST, e)
        return True

    # --- leaving the block ------------------------------------------------------------

    def _exit_call(self, exc: BaseException | None) -> tuple[Call | None, bool]:
        """What leaving the block sends, and whether that call is the completion (whose
        failure the caller must see). Decided, not done: both exits execute it."""
        if self.cancel_reason is None:
            if exc is None:
                return _calls.complete(self.job_id, owner=self.owner,
                                       generation=self.generation, result=self.result), True
            return self._release_call(exc), False
        if self.cancel_reason != LOST and time.monotonic() < self._deadline:
            call = self._release_call(exc)
            call.attempt_timeout = call.budget = RELEASE_AFTER_CANCEL_WAIT
            return call, False
        return None, False

    def _release_call(self, exc: BaseException | None) -> Call:
        error = None if exc is None else _error_text(exc)
        return _calls.release(self.job_id, owner=self.owner, generation=self.generation,
                              retry=exc is not None, delay_ms=None, error=error)

    def _exited(self, answer: Answer | None, completing: bool, error: Exception | None) -> None:
        """Records the exit's outcome; raises a failed completion."""
        if error is not None:
            if completing:
                raise error
            log.warning("release of %s/%d on exit failed: %s", self.job_id, self.generation, error)
            return
        if answer is not None:
            try:
                self.job = _calls.job_of(answer, 200)
            except LeaseholdError as e:
                if completing:
                    raise
                log.warning("release of %s/%d answered %s", self.job_id, self.generation, e)

    def _enter(self, want_async: bool) -> None:
        is_async = isinstance(self.cancelled, asyncio.Event)
        if is_async != want_async:
            raise TypeError("use `async with` for a lease of an AsyncClient, "
                            "`with` for one of a Client")
        if self._entered:
            raise RuntimeError(f"lease {self.job_id}/{self.generation} was entered already")
        self._entered = True

    # --- blocking ----------------------------------------------------------------------

    def __enter__(self) -> Lease[E]:
        self._enter(want_async=False)
        assert self._sync is not None
        self._keeper = keeper = _ThreadKeeper(self, self._sync)
        keeper.start()
        return self

    def __exit__(self, et: type[BaseException] | None, exc: BaseException | None,
                 tb: object) -> None:
        assert isinstance(self._keeper, _ThreadKeeper) and self._sync is not None
        self._keeper.stop()
        call, completing = self._exit_call(exc)
        if call is None:
            log.info("lease %s/%d left after %s: nothing sent", self.job_id, self.generation,
                     self.cancel_reason)
            return
        answer, error = None, None
        try:
            answer = self._sync.execute(call)
        except LeaseholdError as e:
            error = e
        self._exited(answer, completing, error)

    # --- asyncio -----------------------------------------------------------------------

    async def __aenter__(self) -> Lease[E]:
        self._enter(want_async=True)
        assert self._async is not None
        self._keeper = keeper = _TaskKeeper(self, self._async)
        keeper.start()
        return self

    async def __aexit__(self, et: type[BaseException] | None, exc: BaseException | None,
                        tb: object) -> None:
        assert isinstance(self._keeper, _TaskKeeper) and self._async is not None
        await self._keeper.astop()
        call, completing = self._exit_call(exc)
        if call is None:
            log.info("lease %s/%d left after %s: nothing sent", self.job_id, self.generation,
                     self.cancel_reason)
            return
        answer, error = None, None
        try:
            answer = await self._async.execute(call)
        except LeaseholdError as e:
            error = e
        self._exited(answer, completing, error)


class _ThreadKeeper:
    """The keep-alive of a blocking lease: a renewer thread, and a watcher thread that
    sets ``cancelled`` at ``stop_at`` even while a renew is still in flight."""

    def __init__(self, lease: Lease[Any], transport: SyncTransport) -> None:
        self._lease = lease
        self._transport = transport
        self._stop = threading.Event()

    def start(self) -> None:
        name = f"leasehold-{self._lease.job_id}/{self._lease.generation}"
        for target, role in ((self._renew_loop, "renew"), (self._watch, "deadline")):
            threading.Thread(target=target, name=f"{name}-{role}", daemon=True).start()

    def wake(self) -> None:
        """Cancellation fired: both threads end."""
        self._stop.set()

    def stop(self) -> None:
        """The block ended: no renew is started after this returns."""
        self._stop.set()

    def _watch(self) -> None:
        lease = self._lease
        while not self._stop.is_set():
            left = lease.stop_at - time.monotonic()
            if left <= 0:
                lease._fire(DEADLINE)
                return
            self._stop.wait(left)

    def _renew_loop(self) -> None:
        lease = self._lease
        next_renew = lease.sent_at + lease.renew_every
        transport = self._transport
        while not self._stop.wait(max(0.0, next_renew - time.monotonic())):
            call, version = lease._renew_call()
            call.abandon = self._stop.is_set
            try:
                answer = transport.execute(call)
                if self._stop.is_set():
                    return
                lease._renewed(answer, version)
            except LeaseholdError as e:
                if self._stop.is_set() or lease._renew_failed(e):
                    return
                next_renew = time.monotonic() + RENEW_ROUND_PAUSE
                continue
            except RuntimeError:  # the client was closed under a lease still kept alive
                log.warning("lease %s/%d: client closed, keep-alive ends", lease.job_id,
                            lease.generation)
                return
            next_renew = lease.sent_at + lease.renew_every


class _TaskKeeper:
    """The keep-alive of an asyncio lease: one task that renews, with each renew round
    bounded by ``stop_at`` (``asyncio.wait_for``), so ``cancelled`` is set on time
    while the event loop runs."""

    def __init__(self, lease: Lease[Any], transport: AsyncTransport) -> None:
        self._lease = lease
        self._transport = transport
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    def wake(self) -> None:
        """Cancellation fired inside the task: its loop ends by itself."""

    async def astop(self) -> None:
        """Stops the task and waits for it (a renew in flight is abandoned)."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    async def _run(self) -> None:
        lease = self._lease
        next_renew = lease.sent_at + lease.renew_every
        while not lease.cancelled.is_set():
            now = time.monotonic()
            if now >= lease.stop_at:
                lease._fire(DEADLINE)
                return
            if now < next_renew:
                await asyncio.sleep(min(next_renew, lease.stop_at) - now)
                continue
            next_renew = await self._round()

    async def _round(self) -> float:
        """One renew round, cut at ``stop_at``; the time of the next one."""
        lease = self._lease
        call, version = lease._renew_call()
        left = max(0.0, lease.stop_at - time.monotonic())
        try:
            answer = await asyncio.wait_for(self._transport.execute(call), timeout=left)
            lease._renewed(answer, version)
        except asyncio.TimeoutError:
            lease._fire(DEADLINE)
        except LeaseholdError as e:
            if not lease._renew_failed(e):
                return time.monotonic() + RENEW_ROUND_PAUSE
        return lease.sent_at + lease.renew_every
