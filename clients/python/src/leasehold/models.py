"""The api.md objects as typed, immutable Python objects: :class:`Job`, :class:`Event`,
:class:`JobPage`, :class:`ClusterStatus`. JSON values (payload, result, progress) are
plain decoded Python values. Version 1.1's fields default when a node of the first
release answers without them; fields a newer node adds are ignored."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: api.md's default of ``backoff_ms_max``, reported when a node leaves it out.
BACKOFF_MS_MAX_DEFAULT = 3_600_000


def _protocol_error(message: str) -> Exception:
    """The error an answer that is no api.md object raises. Imported here, not at the top:
    errors.py names :class:`Job` (an error carries the job it is about), and a
    module-level import back would close an import circle (tests/test_layout.py)."""
    from .errors import ProtocolError

    return ProtocolError(message)


def _req(d: dict[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    v = d.get(key)
    if not isinstance(v, kind) or isinstance(v, bool) and kind is int:
        raise _protocol_error(f"field {key!r} missing or not {kind}: {str(d)[:300]}")
    return v


def _opt(d: dict[str, Any], key: str, kind: type, default: Any = None) -> Any:
    v = d.get(key, default)
    if v is None or isinstance(v, kind):
        return v
    raise _protocol_error(f"field {key!r} is not {kind.__name__}: {str(d)[:300]}")


def _obj(d: object, what: str) -> dict[str, Any]:
    if not isinstance(d, dict):
        raise _protocol_error(f"{what} is not a JSON object: {str(d)[:300]}")
    return d


@dataclass(frozen=True)
class Job:
    """api.md's Job. ``state`` is ``pending``, ``leased``, ``completed``, ``failed`` or
    ``cancelled``; ``generation`` is the last fencing token granted; ``owner`` the holder
    of a live lease (or the worker that completed it)."""

    id: str
    queue: str
    state: str
    owner: str | None
    generation: int
    lease_until_ms: int | None
    attempts: int
    max_attempts: int | None
    payload: Any
    result: Any
    created_ms: int
    updated_ms: int
    log_index: int
    run_at_ms: int | None = None
    priority: int = 0
    backoff_ms: int = 0
    backoff_ms_max: int = BACKOFF_MS_MAX_DEFAULT
    last_error: str | None = None
    cancel_requested: bool = False
    cancel_reason: str | None = None
    progress: Any = None
    progress_ms: int | None = None

    @classmethod
    def from_json(cls, raw: object) -> Job:
        """Decodes a Job object; :class:`~leasehold.ProtocolError` when it is not one."""
        d = _obj(raw, "job")
        return cls(
            id=_req(d, "id", str),
            queue=_req(d, "queue", str),
            state=_req(d, "state", str),
            owner=_opt(d, "owner", str),
            generation=_req(d, "generation", int),
            lease_until_ms=_opt(d, "lease_until_ms", int),
            attempts=_req(d, "attempts", int),
            max_attempts=_opt(d, "max_attempts", int),
            payload=d.get("payload"),
            result=d.get("result"),
            created_ms=_req(d, "created_ms", int),
            updated_ms=_req(d, "updated_ms", int),
            log_index=_req(d, "log_index", int),
            run_at_ms=_opt(d, "run_at_ms", int),
            priority=_opt(d, "priority", int, 0) or 0,
            backoff_ms=_opt(d, "backoff_ms", int, 0) or 0,
            backoff_ms_max=_opt(d, "backoff_ms_max", int, BACKOFF_MS_MAX_DEFAULT)
            or BACKOFF_MS_MAX_DEFAULT,
            last_error=_opt(d, "last_error", str),
            cancel_requested=bool(_opt(d, "cancel_requested", bool, False)),
            cancel_reason=_opt(d, "cancel_reason", str),
            progress=d.get("progress"),
            progress_ms=_opt(d, "progress_ms", int),
        )


@dataclass(frozen=True)
class JobPage:
    """One page of ``GET /v1/jobs``: the jobs, and the token of the next page (``None``
    on the last)."""

    jobs: list[Job]
    next_page_token: str | None

    @classmethod
    def from_json(cls, raw: object) -> JobPage:
        """Decodes ``{"jobs": [...], "next_page_token": ...}``."""
        d = _obj(raw, "job page")
        return cls(
            jobs=[Job.from_json(j) for j in _req(d, "jobs", list)],
            next_page_token=_opt(d, "next_page_token", str),
        )


@dataclass(frozen=True)
class Event:
    """One entry of a job's history or of the event feed (api.md 1.1). ``event`` is one
    of ``submitted``, ``claimed``, ``released``, ``expired``, ``completed``, ``failed``,
    ``cancel_requested``, ``cancelled``, ``retried``, ``deleted``; ``seq`` is one
    cluster-wide sequence, strictly increasing in log order."""

    seq: int
    job_id: str
    queue: str
    event: str
    generation: int
    owner: str | None
    cluster_time_ms: int
    log_index: int
    detail: Any = None

    @classmethod
    def from_json(cls, raw: object) -> Event:
        """Decodes an Event object."""
        d = _obj(raw, "event")
        return cls(
            seq=_req(d, "seq", int),
            job_id=_req(d, "job_id", str),
            queue=_req(d, "queue", str),
            event=_req(d, "event", str),
            generation=_req(d, "generation", int),
            owner=_opt(d, "owner", str),
            cluster_time_ms=_req(d, "cluster_time_ms", int),
            log_index=_req(d, "log_index", int),
            detail=d.get("detail"),
        )


@dataclass(frozen=True)
class ClusterStatus:
    """``GET /v1/cluster``: one node's view. ``nodes`` maps node ids (strings, as JSON
    keys) to the addresses the nodes advertise; the client never dials them itself."""

    node_id: int
    leader_id: int | None
    term: int
    voters: list[int]
    learners: list[int]
    nodes: dict[str, str]
    commit_index: int
    applied_index: int
    cluster_time_ms: int
    state: str | None = None
    cluster_id: str | None = None
    cluster_version: int | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_json(cls, raw: object) -> ClusterStatus:
        """Decodes the cluster status; unknown fields go to ``extra``."""
        d = _obj(raw, "cluster status")
        known = set(cls.__dataclass_fields__) - {"extra"}
        return cls(
            node_id=_req(d, "node_id", int),
            leader_id=_opt(d, "leader_id", int),
            term=_req(d, "term", int),
            voters=list(_req(d, "voters", list)),
            learners=list(_opt(d, "learners", list) or []),
            nodes=dict(_opt(d, "nodes", dict) or {}),
            commit_index=_req(d, "commit_index", int),
            applied_index=_req(d, "applied_index", int),
            cluster_time_ms=_req(d, "cluster_time_ms", int),
            state=_opt(d, "state", str),
            cluster_id=_opt(d, "cluster_id", str),
            cluster_version=_opt(d, "cluster_version", int),
            extra={k: v for k, v in d.items() if k not in known},
        )
