"""The retry decisions as pure functions, mirroring the Rust client's ``retry.rs``: what
an attempt's result means (:func:`judge`), which endpoint to try next
(:class:`Rotation`), and how long to wait first (:func:`backoff`).

Rotation is in passes over the endpoints. Within a pass the next untried endpoint is
tried at once (a dead node says nothing about the others), and the leader hint, when it
names a node this client knows, is tried first, but only once per pass: a stale hint
must not pin the client to a dead node. Only between passes does the client wait:
jittered exponential backoff, and at least the largest ``Retry-After`` of the pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

#: Attempts per call, the first included: with three nodes, at least two full passes.
MAX_ATTEMPTS = 8
#: Backoff before the second pass (seconds); doubles per pass up to BACKOFF_MAX.
BACKOFF_BASE = 0.050
BACKOFF_MAX = 2.0
#: ``Retry-After`` is honoured up to this long: a misconfigured node must not stall us.
RETRY_AFTER_MAX = 5.0


class Attempt(Enum):
    """What one attempt came to, as far as retrying is concerned."""

    ANSWERED = "answered"
    #: The connection could not be made: the request never left.
    NOT_SENT = "not_sent"
    #: The request was (or may have been) sent and no full answer came back.
    LOST = "lost"


@dataclass(frozen=True)
class Verdict:
    """The decision about an attempt: ``final`` (hand the answer to the caller), else
    retry elsewhere; ``maybe_applied`` when this attempt may have taken effect."""

    final: bool
    maybe_applied: bool = False


def judge(attempt: Attempt, status: int = 0) -> Verdict:
    """api.md's availability errors: 503 was not applied (retry after ``Retry-After``);
    504 was proposed, outcome unknown (retry with the same key); a 502 can only come from
    something in between that may have passed the request on: unknown too."""
    if attempt is Attempt.NOT_SENT:
        return Verdict(final=False)
    if attempt is Attempt.LOST:
        return Verdict(final=False, maybe_applied=True)
    if status == 503:
        return Verdict(final=False)
    if status in (502, 504):
        return Verdict(final=False, maybe_applied=True)
    return Verdict(final=True)


def backoff(pass_no: int, retry_after: float | None, jitter: float) -> float:
    """The wait (seconds) before pass ``pass_no`` (1 = the second pass): ``base ×
    2^(pass−1)`` capped, with "equal jitter" (half fixed, half random, ``jitter`` in
    ``[0, 1)``), and at least ``retry_after`` (capped at RETRY_AFTER_MAX)."""
    doublings = min(max(pass_no - 1, 0), 20)
    exp = min(BACKOFF_BASE * (1 << doublings), BACKOFF_MAX)
    jittered = exp / 2 + exp * min(max(jitter, 0.0), 1.0) / 2
    floor = min(retry_after, RETRY_AFTER_MAX) if retry_after is not None else 0.0
    return max(jittered, floor)


class Rotation:
    """Which endpoint to try next, pass by pass."""

    def __init__(self, endpoints: int, first: int) -> None:
        if endpoints <= 0:
            raise ValueError("a client has at least one endpoint")
        self._tried = [False] * endpoints
        self.current = first % endpoints
        self._tried[self.current] = True
        #: How many full passes were completed before the current attempt.
        self.passes = 0

    def advance(self, hint: int | None) -> tuple[int, bool]:
        """After a failed attempt: ``(endpoint, new_pass)``. The hinted endpoint if
        untried in this pass, else the next untried one; when all were tried a new pass
        starts (at the hint if any, else after the current one) and the caller backs
        off first."""
        n = len(self._tried)
        if hint is not None and not 0 <= hint < n:
            hint = None
        pick = hint if hint is not None and not self._tried[hint] else None
        if pick is None:
            pick = next(
                (i for i in ((self.current + k) % n for k in range(1, n)) if not self._tried[i]),
                None,
            )
        new_pass = pick is None
        if pick is None:
            self._tried = [False] * n
            self.passes += 1
            pick = hint if hint is not None else (self.current + 1) % n
        self._tried[pick] = True
        self.current = pick
        return pick, new_pass
