"""The errors a call can raise: one class per api.md error code, plus the outcomes only a
client sees (no node could serve the call; a write may or may not have been applied).

The line that matters most is between :class:`Unavailable` and :class:`OutcomeUnknown`.
A write whose every attempt failed to connect or was refused with 503 was never applied;
a write that was sent and then lost its answer (504, a timeout, a cut connection) may
have been. Reporting the second as "failed" would let a caller believe a claim did not
happen when it did ("unknown is not absent"), so it has its own class, and
:class:`Timeout` (the 504 ``timeout`` code) is one of its kinds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .models import Job

__all__ = [
    "LeaseholdError",
    "ProtocolError",
    "OutcomeUnknown",
    "InvalidArgument",
    "Unauthenticated",
    "PermissionDenied",
    "NotFound",
    "AlreadyExists",
    "LeaseHeld",
    "JobCompleted",
    "JobFailed",
    "StaleLease",
    "LeaseExpired",
    "PayloadTooLarge",
    "UnsupportedMediaType",
    "NotDue",
    "JobCancelled",
    "InvalidState",
    "EventsCompacted",
    "IdempotencyKeyReused",
    "IdempotencyFull",
    "Internal",
    "Unavailable",
    "Timeout",
    "error_class",
]


class LeaseholdError(Exception):
    """Any error of this package.

    ``code`` is the api.md error code (``"stale_lease"``…), or ``"outcome_unknown"`` /
    ``"protocol"`` for what only a client sees; ``status`` the HTTP status (0 when no
    answer came); ``message`` the explanation; ``job`` the job the error is about, when
    the store sent it (e.g. the current state of a job whose lease is stale).
    """

    code: str = "error"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        status: int = 0,
        job: Job | None = None,
    ) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        self.status = status
        self.message = message
        self.job = job

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class ProtocolError(LeaseholdError):
    """An answer that does not follow api.md: an undecodable body, an unexpected status."""

    code = "protocol"


class OutcomeUnknown(LeaseholdError):
    """A write was sent at least once and its answer never arrived (504, a timeout, a
    cut connection), and the retries under the same ``Idempotency-Key`` did not settle
    it. It may or may not have been applied: never treat this as "failed". Reads never
    raise it (they end in :class:`Unavailable`)."""

    code = "outcome_unknown"


class InvalidArgument(LeaseholdError):
    """400 ``invalid_argument``; also raised locally, before anything is sent, for an
    argument the client can check itself (an id, an owner, a TTL out of range)."""

    code = "invalid_argument"


class Unauthenticated(LeaseholdError):
    """401 ``unauthenticated``: no token, or an unknown one."""

    code = "unauthenticated"


class PermissionDenied(LeaseholdError):
    """403 ``permission_denied``: the token's role, owner prefix or scope forbids it."""

    code = "permission_denied"


class NotFound(LeaseholdError):
    """404 ``not_found``: no such job (or route)."""

    code = "not_found"


class AlreadyExists(LeaseholdError):
    """409 ``already_exists``: submit of an existing id."""

    code = "already_exists"


class LeaseHeld(LeaseholdError):
    """409 ``lease_held``: claim or delete of a job with a live lease."""

    code = "lease_held"


class JobCompleted(LeaseholdError):
    """409 ``job_completed``: the job is completed, for good."""

    code = "job_completed"


class JobFailed(LeaseholdError):
    """409 ``job_failed``: the job failed (or a claim went past ``max_attempts``)."""

    code = "job_failed"


class StaleLease(LeaseholdError):
    """409 ``stale_lease``: another claim superseded this generation (or the owner
    differs). Stop producing effects under this lease."""

    code = "stale_lease"


class LeaseExpired(LeaseholdError):
    """409 ``lease_expired``: the current lease, after its expiry on the store."""

    code = "lease_expired"


class PayloadTooLarge(LeaseholdError):
    """413 ``payload_too_large``: a payload or result over 64 KiB, progress over 16 KiB,
    a body over 1 MiB (also raised locally)."""

    code = "payload_too_large"


class UnsupportedMediaType(LeaseholdError):
    """415 ``unsupported_media_type``: a POST whose ``Content-Type`` is not JSON."""

    code = "unsupported_media_type"


class NotDue(LeaseholdError):
    """409 ``not_due`` (1.1): a direct claim before the job's ``run_at_ms``."""

    code = "not_due"


class JobCancelled(LeaseholdError):
    """409 ``job_cancelled`` (1.1): the job is cancelled."""

    code = "job_cancelled"


class InvalidState(LeaseholdError):
    """409 ``invalid_state`` (1.1): ``retry`` of a job neither failed nor cancelled."""

    code = "invalid_state"


class EventsCompacted(LeaseholdError):
    """410 ``events_compacted`` (1.1): an event feed ``after`` older than the nodes keep."""

    code = "events_compacted"


class IdempotencyKeyReused(LeaseholdError):
    """422 ``idempotency_key_reused``: the same key sent again with a different body."""

    code = "idempotency_key_reused"


class IdempotencyFull(LeaseholdError):
    """429 ``idempotency_full``: a new ``Idempotency-Key`` while this caller's share of
    remembered replies is full inside its 10-minute window. Nothing was applied: send it
    again after the answer's ``Retry-After`` seconds, or without a key."""

    code = "idempotency_full"


class Internal(LeaseholdError):
    """500 ``internal``: an unexpected server fault."""

    code = "internal"


class Unavailable(LeaseholdError):
    """503 ``unavailable``, or no node could serve the call within the retry budget
    (every attempt failed to connect or was answered 503). For a write this means no
    attempt applied it."""

    code = "unavailable"


class Timeout(OutcomeUnknown):
    """504 ``timeout``: the write was proposed and its outcome is unknown. A kind of
    :class:`OutcomeUnknown`, never a failure."""

    code = "timeout"


_BY_CODE: dict[str, type[LeaseholdError]] = {
    cls.code: cls
    for cls in (
        InvalidArgument,
        Unauthenticated,
        PermissionDenied,
        NotFound,
        AlreadyExists,
        LeaseHeld,
        JobCompleted,
        JobFailed,
        StaleLease,
        LeaseExpired,
        PayloadTooLarge,
        UnsupportedMediaType,
        NotDue,
        JobCancelled,
        InvalidState,
        EventsCompacted,
        IdempotencyKeyReused,
        IdempotencyFull,
        Internal,
        Unavailable,
        Timeout,
    )
}

#: The codes after which a lease can never be used again: the holder must stop.
LEASE_GONE_CODES = frozenset(
    {"stale_lease", "lease_expired", "job_completed", "job_failed", "job_cancelled", "not_found"}
)


def error_class(code: str) -> type[LeaseholdError]:
    """The class of an api.md error code; :class:`LeaseholdError` for a code this
    version does not know (a newer server may add codes)."""
    return _BY_CODE.get(code, LeaseholdError)


def from_body(status: int, body: Any, job: Job | None) -> LeaseholdError:
    """The error of an api.md error body ``{"error": {"code", "message", "job"?}}``."""
    err = body.get("error") if isinstance(body, dict) else None
    if not isinstance(err, dict) or not isinstance(err.get("code"), str):
        return ProtocolError(f"not an api.md error body: {str(body)[:300]}", status=status)
    code = err["code"]
    message = str(err.get("message", ""))
    return error_class(code)(message, code=code, status=status, job=job)
