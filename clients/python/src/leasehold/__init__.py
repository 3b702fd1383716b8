"""The Python client of Leasehold: talks to any node of a cluster, retries safely, and
makes the safe way to hold a lease the easy one.

    import leasehold

    with leasehold.Client(["127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"]) as client:
        lease = client.claim_next("emails", owner="worker-a", ttl_ms=10_000, wait_ms=5_000)
        if lease is not None:
            with lease:                          # renews every ttl/3 in the background
                send(lease.payload, token=lease.token)   # stop if lease.cancelled is set
                lease.result = {"sent": True}    # leaving the block completes the job

A lease is temporary ownership, not exactly-once execution: a worker can lose its lease
mid-work and the job then runs again elsewhere. What the client guarantees is that
``lease.cancelled`` is set at or before a local deadline that comes before the store
can have given the job to someone else, and that every write can carry a fencing token
a destination checks (:mod:`leasehold.fence.postgres`).

Layout:

- ``client``: :class:`Client`, :class:`AsyncClient`: every api.md call as a method.
- ``lease``: :class:`Lease`: token, deadline, keep-alive, cancellation, exit.
- ``worker``: :class:`Worker`: a claim loop with signal handling.
- ``models``: :class:`Job`, :class:`Event`, :class:`JobPage`, :class:`ClusterStatus`.
- ``errors``: :class:`LeaseholdError` and one class per api.md error code.
- ``_calls`` (request building and answer decoding), ``_transport`` (attempts, keys),
  ``_retry`` (the retry decisions as pure functions), ``_limits`` (api.md's bounds).
- ``fence.postgres``: the fencing helper for PostgreSQL (extra ``postgres``).
"""

from ._transport import new_idempotency_key
from .client import AsyncClient, Client
from .errors import (
    AlreadyExists,
    EventsCompacted,
    IdempotencyFull,
    IdempotencyKeyReused,
    Internal,
    InvalidArgument,
    InvalidState,
    JobCancelled,
    JobCompleted,
    JobFailed,
    LeaseExpired,
    LeaseHeld,
    LeaseholdError,
    NotDue,
    NotFound,
    OutcomeUnknown,
    PayloadTooLarge,
    PermissionDenied,
    ProtocolError,
    StaleLease,
    Timeout,
    Unauthenticated,
    Unavailable,
    UnsupportedMediaType,
)
from .lease import Lease
from .models import ClusterStatus, Event, Job, JobPage
from .worker import Worker

__version__ = "0.1.0"

__all__ = [
    "Client",
    "AsyncClient",
    "Lease",
    "Worker",
    "Job",
    "JobPage",
    "Event",
    "ClusterStatus",
    "new_idempotency_key",
    "LeaseholdError",
    "ProtocolError",
    "OutcomeUnknown",
    "Timeout",
    "Unavailable",
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
    "IdempotencyFull",
    "IdempotencyKeyReused",
    "Internal",
]
