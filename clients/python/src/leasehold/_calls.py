"""Every api.md call as a pure function from arguments to a :class:`~._transport.Call`
(validated, encoded), and the decoding of its answer. :class:`~leasehold.Client` and
:class:`~leasehold.AsyncClient` only execute these, so the two cannot drift apart.

Writes get a fresh ``Idempotency-Key`` per logical call, kept across its retries; that
includes ``DELETE``: without one, a delete whose answer was lost would be retried into a
404.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from . import _limits as lim
from ._transport import Answer, Call, write
from .errors import InvalidArgument, LeaseholdError, ProtocolError, from_body
from .models import ClusterStatus, Event, Job, JobPage

#: Job states a list may filter on (api.md and 1.1).
JOB_STATES = frozenset({"pending", "leased", "completed", "failed", "cancelled"})
#: The server-side wait of one event-feed poll while following it (seconds).
EVENTS_WAIT_MS_DEFAULT = 10_000


def normalize_endpoint(raw: str) -> str:
    """``host:port`` or ``http(s)://host:port[/]`` → ``http(s)://host:port``; anything
    else is refused here rather than failing on every request later."""
    s = raw.strip()
    scheme = "http"
    for prefix in ("http://", "https://"):
        if s.startswith(prefix):
            scheme, s = prefix[:-3], s[len(prefix):]
            break
    else:
        if "://" in s:
            raise InvalidArgument(f"endpoint {raw!r}: only http:// and https:// are supported")
    s = s.rstrip("/")
    if not s or "/" in s or ":" not in s:
        raise InvalidArgument(
            f"endpoint {raw!r} must be host:port, http://host:port or https://host:port"
        )
    return f"{scheme}://{s}"


def _q(s: str) -> str:
    return quote(s, safe="")


def job_path(job_id: str) -> str:
    """``/v1/jobs/{id}`` with the id validated and sent as ONE path segment: ``/`` is
    ``%2F`` (the node decodes after splitting off the action)."""
    return "/v1/jobs/" + lim.job_id(job_id).replace("/", "%2F")


def _put(body: dict[str, Any], key: str, value: Any) -> None:
    if value is not None:
        body[key] = value


# --- jobs -----------------------------------------------------------------------------


def submit(
    id: str | None, *, queue: str, payload: Any, max_attempts: int | None,
    run_at_ms: int | None, priority: int | None, backoff_ms: int | None,
    backoff_ms_max: int | None, idempotency_key: str | None,
) -> Call:
    """``POST /v1/jobs``."""
    body: dict[str, Any] = {"queue": lim.queue(queue)}
    _put(body, "id", None if id is None else lim.job_id(id))
    _put(body, "payload", None if payload is None else lim.json_value("payload", payload, lim.PAYLOAD_BYTES_MAX))
    _put(body, "max_attempts", None if max_attempts is None else lim.integer("max_attempts", max_attempts, 1, 2**63 - 1))
    _put(body, "run_at_ms", None if run_at_ms is None else lim.integer("run_at_ms", run_at_ms, 0, 2**63 - 1))
    _put(body, "priority", None if priority is None else lim.integer("priority", priority, lim.PRIORITY_MIN, lim.PRIORITY_MAX))
    _put(body, "backoff_ms", None if backoff_ms is None else lim.integer("backoff_ms", backoff_ms, 0, lim.DELAY_MS_MAX))
    _put(body, "backoff_ms_max", None if backoff_ms_max is None else lim.integer("backoff_ms_max", backoff_ms_max, 0, lim.DELAY_MS_MAX))
    if backoff_ms is not None and backoff_ms_max is not None and backoff_ms_max < backoff_ms:
        raise InvalidArgument(
            f"backoff_ms_max ({backoff_ms_max}) must not be below backoff_ms ({backoff_ms})"
        )
    key = None if idempotency_key is None else lim.idempotency_key(idempotency_key)
    return write("POST", "/v1/jobs", body, key)


def get_job(job_id: str) -> Call:
    """``GET /v1/jobs/{id}``."""
    return Call("GET", job_path(job_id))


def list_jobs(
    *, queue: str | None, state: str | None, limit: int | None, page_token: str | None
) -> Call:
    """``GET /v1/jobs?queue=&state=&limit=&page_token=``."""
    q = []
    if queue is not None:
        q.append(f"queue={_q(lim.queue(queue))}")
    if state is not None:
        if state not in JOB_STATES:
            raise InvalidArgument(f"state must be one of {sorted(JOB_STATES)} (got {state!r})")
        q.append(f"state={state}")
    if limit is not None:
        q.append(f"limit={lim.integer('limit', limit, 1, lim.LIST_LIMIT_MAX)}")
    if page_token is not None:
        q.append(f"page_token={_q(page_token)}")
    return Call("GET", "/v1/jobs" + ("?" + "&".join(q) if q else ""))


def delete_job(job_id: str) -> Call:
    """``DELETE /v1/jobs/{id}``."""
    return write("DELETE", job_path(job_id))


# --- leases ---------------------------------------------------------------------------


def claim(job_id: str, *, owner: str, ttl_ms: int) -> Call:
    """``POST /v1/jobs/{id}/claim``."""
    body = {"owner": lim.owner(owner), "ttl_ms": lim.ttl_ms(ttl_ms)}
    return write("POST", job_path(job_id) + "/claim", body)


def check_claim_next(queue: str, *, owner: str, ttl_ms: int, wait_ms: int) -> None:
    """Validates a claim-next before its first slice is sent."""
    lim.queue(queue)
    lim.owner(owner)
    lim.ttl_ms(ttl_ms)
    lim.integer("wait_ms", wait_ms, 0, lim.WAIT_MS_MAX)


def claim_next_once(queue: str, *, owner: str, ttl_ms: int, wait_ms: int) -> Call:
    """One ``POST /v1/queues/{queue}/claim`` waiting ``wait_ms`` on the server."""
    body: dict[str, Any] = {"owner": owner, "ttl_ms": ttl_ms}
    if wait_ms > 0:
        body["wait_ms"] = wait_ms
    call = write("POST", f"/v1/queues/{_q(queue)}/claim", body)
    call.extra_wait = wait_ms / 1000
    return call


def claim_slice_ms(ttl_ms: int) -> int:
    """A claim-next's wait is split into slices of at most a quarter of the TTL, each
    its own call: a lease's local deadline counts from the send of the request that got
    it, so a lease granted at the end of one long wait would arrive expired locally."""
    return max(ttl_ms // 4, 10)


def renew(
    job_id: str, *, owner: str, generation: int, ttl_ms: int | None, progress: Any
) -> Call:
    """``POST /v1/jobs/{id}/renew`` (``progress``: a 1.1 checkpoint, ≤ 16 KiB)."""
    body: dict[str, Any] = {"owner": lim.owner(owner), "generation": _generation(generation)}
    _put(body, "ttl_ms", None if ttl_ms is None else lim.ttl_ms(ttl_ms))
    _put(body, "progress", None if progress is None else lim.json_value("progress", progress, lim.PROGRESS_BYTES_MAX))
    return write("POST", job_path(job_id) + "/renew", body)


def _generation(g: object) -> int:
    return lim.integer("generation", g, 0, 2**64 - 1)


def complete(job_id: str, *, owner: str, generation: int, result: Any) -> Call:
    """``POST /v1/jobs/{id}/complete``."""
    body: dict[str, Any] = {"owner": lim.owner(owner), "generation": _generation(generation)}
    _put(body, "result", None if result is None else lim.json_value("result", result, lim.PAYLOAD_BYTES_MAX))
    return write("POST", job_path(job_id) + "/complete", body)


def release(
    job_id: str, *, owner: str, generation: int, retry: bool, delay_ms: int | None,
    error: str | None,
) -> Call:
    """``POST /v1/jobs/{id}/release`` with 1.1's ``retry``, ``delay_ms``, ``error``."""
    body: dict[str, Any] = {"owner": lim.owner(owner), "generation": _generation(generation)}
    if not isinstance(retry, bool):
        raise InvalidArgument(f"retry must be a bool (got {type(retry).__name__})")
    _put(body, "retry", True if retry else None)
    _put(body, "delay_ms", None if delay_ms is None else lim.integer("delay_ms", delay_ms, 0, lim.DELAY_MS_MAX))
    _put(body, "error", None if error is None else lim.text("error", error, lim.ERROR_BYTES_MAX))
    return write("POST", job_path(job_id) + "/release", body)


def fail(job_id: str, *, owner: str, generation: int, error: str | None) -> Call:
    """``POST /v1/jobs/{id}/fail`` (1.1)."""
    body: dict[str, Any] = {"owner": lim.owner(owner), "generation": _generation(generation)}
    _put(body, "error", None if error is None else lim.text("error", error, lim.ERROR_BYTES_MAX))
    return write("POST", job_path(job_id) + "/fail", body)


def cancel(job_id: str, *, reason: str | None) -> Call:
    """``POST /v1/jobs/{id}/cancel`` (1.1)."""
    body: dict[str, Any] = {}
    _put(body, "reason", None if reason is None else lim.text("reason", reason, lim.REASON_BYTES_MAX))
    return write("POST", job_path(job_id) + "/cancel", body)


def retry(job_id: str, *, run_at_ms: int | None) -> Call:
    """``POST /v1/jobs/{id}/retry`` (1.1)."""
    body: dict[str, Any] = {}
    _put(body, "run_at_ms", None if run_at_ms is None else lim.integer("run_at_ms", run_at_ms, 0, 2**63 - 1))
    return write("POST", job_path(job_id) + "/retry", body)


def redrive(queue: str, *, limit: int | None) -> Call:
    """``POST /v1/queues/{queue}/redrive`` (1.1)."""
    body: dict[str, Any] = {}
    _put(body, "limit", None if limit is None else lim.integer("limit", limit, 1, lim.REDRIVE_LIMIT_MAX))
    return write("POST", f"/v1/queues/{_q(lim.queue(queue))}/redrive", body)


# --- history, events, cluster ---------------------------------------------------------


def history(job_id: str) -> Call:
    """``GET /v1/jobs/{id}/history`` (1.1)."""
    return Call("GET", job_path(job_id) + "/history")


def events(
    *, after: int, queue: str | None, job_id: str | None, limit: int | None, wait_ms: int
) -> Call:
    """``GET /v1/events?after=&queue=&job_id=&limit=&wait_ms=`` (1.1)."""
    q = [f"after={lim.integer('after', after, 0, 2**64 - 1)}"]
    if queue is not None:
        q.append(f"queue={_q(lim.queue(queue))}")
    if job_id is not None:
        q.append(f"job_id={_q(lim.job_id(job_id))}")
    if limit is not None:
        q.append(f"limit={lim.integer('limit', limit, 1, lim.EVENTS_LIMIT_MAX)}")
    if wait_ms > 0:
        q.append(f"wait_ms={lim.integer('wait_ms', wait_ms, 0, lim.WAIT_MS_MAX)}")
    call = Call("GET", "/v1/events?" + "&".join(q))
    call.extra_wait = wait_ms / 1000
    return call


def cluster_status() -> Call:
    """``GET /v1/cluster``."""
    return Call("GET", "/v1/cluster")


# --- answers --------------------------------------------------------------------------


def body_of(a: Answer, *ok: int) -> Any:
    """The decoded body of a success status in ``ok``; raises the api.md error (or a
    :class:`~leasehold.ProtocolError`) otherwise."""
    if a.status not in ok:
        raise error_of(a)
    try:
        return a.json()
    except ValueError as e:
        raise ProtocolError(f"undecodable body ({e}): {a.body[:300]!r}", status=a.status) from None


def error_of(a: Answer) -> LeaseholdError:
    """The error an answer carries."""
    try:
        body = a.json()
    except ValueError:
        return ProtocolError(f"HTTP {a.status}: {a.body[:300]!r}", status=a.status)
    err = body.get("error") if isinstance(body, dict) else None
    job = None
    if isinstance(err, dict) and isinstance(err.get("job"), dict):
        try:
            job = Job.from_json(err["job"])
        except ProtocolError:
            job = None
    return from_body(a.status, body, job)


def job_of(a: Answer, *ok: int) -> Job:
    """A Job answer."""
    return Job.from_json(body_of(a, *ok))


def page_of(a: Answer) -> JobPage:
    """A JobPage answer."""
    return JobPage.from_json(body_of(a, 200))


def deleted(a: Answer) -> None:
    """A delete's 204."""
    if a.status != 204:
        raise error_of(a)


def redriven(a: Answer) -> int:
    """``{"retried": n}``."""
    body = body_of(a, 200)
    n = body.get("retried") if isinstance(body, dict) else None
    if not isinstance(n, int):
        raise ProtocolError(f"redrive answer without 'retried': {body!r}", status=a.status)
    return n


def history_of(a: Answer) -> list[Event]:
    """``{"events": [...]}``."""
    body = body_of(a, 200)
    evs = body.get("events") if isinstance(body, dict) else None
    if not isinstance(evs, list):
        raise ProtocolError(f"history answer without 'events': {str(body)[:300]}", status=a.status)
    return [Event.from_json(e) for e in evs]


def events_of(a: Answer) -> tuple[list[Event], int]:
    """``{"events": [...], "next_after": seq}``."""
    evs = history_of(a)
    body = a.json()
    nxt = body.get("next_after")
    if not isinstance(nxt, int):
        raise ProtocolError(f"events answer without 'next_after': {str(body)[:300]}", status=a.status)
    return evs, nxt


def cluster_of(a: Answer) -> ClusterStatus:
    """A ClusterStatus answer."""
    return ClusterStatus.from_json(body_of(a, 200))


def lease_wire(a: Answer) -> dict[str, Any]:
    """A Lease object, checked for the fields the lease handle needs."""
    body = body_of(a, 200)
    if not isinstance(body, dict):
        raise ProtocolError(f"lease is not an object: {str(body)[:300]}", status=a.status)
    for key, kind in (("job_id", str), ("owner", str), ("generation", int), ("ttl_ms", int)):
        if not isinstance(body.get(key), kind):
            raise ProtocolError(f"lease without {key!r}: {str(body)[:300]}", status=a.status)
    return body
