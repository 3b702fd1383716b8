"""Unit-level checks that need no cluster: the retry decisions, the deadline arithmetic,
local validation (nothing is sent: a real listening socket sees no connection), error
classes, decoding."""

from __future__ import annotations

import socket

import pytest

import leasehold
from leasehold import _calls, _retry, errors
from leasehold.lease import cleanup_window, usable_seconds


def test_availability_errors_retry_and_others_are_final() -> None:
    A = _retry.Attempt
    assert _retry.judge(A.ANSWERED, 503) == _retry.Verdict(final=False, maybe_applied=False)
    assert _retry.judge(A.ANSWERED, 504) == _retry.Verdict(final=False, maybe_applied=True)
    assert _retry.judge(A.ANSWERED, 502).maybe_applied
    for status in (200, 201, 204, 400, 404, 409, 413, 422, 500):
        assert _retry.judge(A.ANSWERED, status).final, status
    assert _retry.judge(A.NOT_SENT) == _retry.Verdict(final=False, maybe_applied=False)
    assert _retry.judge(A.LOST) == _retry.Verdict(final=False, maybe_applied=True)


def test_backoff_doubles_up_to_the_cap_with_bounded_jitter() -> None:
    for pass_no, exp in ((1, 0.05), (2, 0.1), (3, 0.2), (4, 0.4), (7, 2.0), (60, 2.0)):
        assert _retry.backoff(pass_no, None, 0.0) == pytest.approx(exp / 2)
        hi = _retry.backoff(pass_no, None, 0.999999)
        assert exp * 0.9 < hi <= exp


def test_retry_after_is_a_floor_and_is_capped() -> None:
    assert _retry.backoff(1, 1.0, 0.5) == 1.0
    assert _retry.backoff(1, 60.0, 0.5) == _retry.RETRY_AFTER_MAX
    assert _retry.backoff(7, 0.001, 0.0) == pytest.approx(1.0)


def test_rotation_visits_every_endpoint_once_per_pass_and_follows_a_hint_once() -> None:
    r = _retry.Rotation(3, 1)
    assert [r.advance(None) for _ in range(3)] == [(2, False), (0, False), (1, True)]
    assert r.passes == 1
    r = _retry.Rotation(3, 0)
    assert r.advance(2) == (2, False)
    assert r.advance(2) == (1, False), "a hint already tried this pass is not followed again"
    assert r.advance(2) == (2, True)
    assert _retry.Rotation(1, 5).advance(9) == (0, True), "an unknown hint is ignored"


def test_the_deadline_keeps_drift_and_margin_and_never_goes_negative() -> None:
    assert usable_seconds(10_000) == pytest.approx(9.8)  # 10 s × 0.99 − 0.1 s
    assert usable_seconds(100) == 0.0
    for ttl_ms in (100, 101, 250, 1000, 60_000, 3_600_000):
        assert usable_seconds(ttl_ms) <= ttl_ms / 1000 - 0.1 or usable_seconds(ttl_ms) == 0


def test_endpoints_are_normalized_and_bad_ones_refused() -> None:
    assert _calls.normalize_endpoint("127.0.0.1:7001") == "http://127.0.0.1:7001"
    assert _calls.normalize_endpoint(" http://n1:7001/ ") == "http://n1:7001"
    assert _calls.normalize_endpoint("https://n1:7001") == "https://n1:7001"
    for bad in ("ftp://x:1", "https://", "", "http://x:1/v1", "justahost"):
        with pytest.raises(leasehold.InvalidArgument):
            _calls.normalize_endpoint(bad)
    with pytest.raises(leasehold.InvalidArgument, match="CA"):
        leasehold.Client("https://127.0.0.1:1")
    with pytest.raises(leasehold.InvalidArgument):
        leasehold.Client("127.0.0.1:1", token="has space")


def test_job_ids_are_one_path_segment() -> None:
    assert _calls.job_path("invoice-42") == "/v1/jobs/invoice-42"
    assert _calls.job_path("a/b/claim") == "/v1/jobs/a%2Fb%2Fclaim"
    assert _calls.job_path("...") == "/v1/jobs/..."
    for bad in ("", "a b", ".", "..", "a?b", "x" * 257, "é"):
        with pytest.raises(leasehold.InvalidArgument):
            _calls.job_path(bad)


def test_every_api_md_code_has_its_class() -> None:
    codes = {
        "invalid_argument": "InvalidArgument", "unauthenticated": "Unauthenticated",
        "permission_denied": "PermissionDenied", "not_found": "NotFound",
        "already_exists": "AlreadyExists", "lease_held": "LeaseHeld",
        "job_completed": "JobCompleted", "job_failed": "JobFailed",
        "stale_lease": "StaleLease", "lease_expired": "LeaseExpired",
        "payload_too_large": "PayloadTooLarge",
        "unsupported_media_type": "UnsupportedMediaType", "not_due": "NotDue",
        "job_cancelled": "JobCancelled", "invalid_state": "InvalidState",
        "events_compacted": "EventsCompacted",
        "idempotency_key_reused": "IdempotencyKeyReused",
        "idempotency_full": "IdempotencyFull", "internal": "Internal",
        "unavailable": "Unavailable", "timeout": "Timeout",
    }
    for code, name in codes.items():
        cls = getattr(leasehold, name)
        assert errors.error_class(code) is cls and cls.code == code
        e = errors.from_body(409, {"error": {"code": code, "message": "m"}}, None)
        assert type(e) is cls and e.code == code and e.status == 409 and e.message == "m"
    assert issubclass(leasehold.Timeout, leasehold.OutcomeUnknown)
    assert not issubclass(leasehold.Unavailable, leasehold.OutcomeUnknown)
    unknown = errors.from_body(418, {"error": {"code": "teapot", "message": ""}}, None)
    assert type(unknown) is leasehold.LeaseholdError and unknown.code == "teapot"


def _nested(depth: int) -> list[object]:
    v: list[object] = []
    for _ in range(depth - 1):
        v = [v]
    return v


class _Listener:
    """A real listening socket that counts the connections made to it."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.setblocking(False)
        self.endpoint = f"127.0.0.1:{self.sock.getsockname()[1]}"

    def connections(self) -> int:
        n = 0
        while True:
            try:
                conn, _ = self.sock.accept()
                conn.close()
                n += 1
            except BlockingIOError:
                return n


@pytest.mark.parametrize("call", [
    lambda c: c.claim("a b", owner="w", ttl_ms=1000),
    lambda c: c.claim("j", owner="", ttl_ms=1000),
    lambda c: c.claim("j", owner="w", ttl_ms=99),
    lambda c: c.claim("j", owner="w", ttl_ms=3_600_001),
    lambda c: c.claim_next("Bad", owner="w", ttl_ms=1000),
    lambda c: c.claim_next("q", owner="w", ttl_ms=1000, wait_ms=30_001),
    lambda c: c.submit(queue="UPPER"),
    lambda c: c.submit(priority=1001),
    lambda c: c.submit(payload=_nested(65)),
    lambda c: c.submit(payload={1, 2}),
    lambda c: c.submit(backoff_ms=10, backoff_ms_max=5),
    lambda c: c.submit(idempotency_key="has space"),
    lambda c: c.list_jobs(limit=1001),
    lambda c: c.list_jobs(state="sleeping"),
    lambda c: c.iter_jobs(limit=0),
    lambda c: c.events(after=-1),
    lambda c: c.release("j", owner="w", generation=1, error="x" * 4097),
    lambda c: c.cancel("j", reason="x" * 1025),
    lambda c: c.redrive("q", limit=0),
    lambda c: c.renew("j", owner="w", generation=True),
])
def test_bad_arguments_raise_before_anything_is_sent(call: object) -> None:
    listener = _Listener()
    with leasehold.Client(listener.endpoint) as c:
        with pytest.raises(leasehold.InvalidArgument):
            call(c)  # type: ignore[operator]
    assert listener.connections() == 0


def test_values_over_their_size_are_refused_locally() -> None:
    listener = _Listener()
    with leasehold.Client(listener.endpoint) as c:
        with pytest.raises(leasehold.PayloadTooLarge):
            c.submit(payload="x" * (64 * 1024))
        with pytest.raises(leasehold.PayloadTooLarge):
            c.renew("j", owner="w", generation=1, progress="x" * (16 * 1024))
    assert listener.connections() == 0


def test_an_unreachable_cluster_is_unavailable_not_unknown() -> None:
    port = _Listener()  # bound then closed: nothing listens there any more
    endpoint = port.endpoint
    port.sock.close()
    with leasehold.Client(endpoint, max_attempts=2) as c:
        with pytest.raises(leasehold.Unavailable) as e:
            c.submit(payload=1)
    assert e.value.code == "unavailable"


def test_decoding_ignores_unknown_fields_and_defaults_1_1_fields() -> None:
    job = leasehold.Job.from_json({
        "id": "a", "queue": "default", "state": "pending", "owner": None, "generation": 0,
        "lease_until_ms": None, "attempts": 0, "max_attempts": None, "payload": {"n": 1},
        "result": None, "created_ms": 1, "updated_ms": 1, "log_index": 3, "future": True,
    })
    assert job.payload == {"n": 1} and job.priority == 0 and job.backoff_ms_max == 3_600_000
    with pytest.raises(leasehold.ProtocolError):
        leasehold.Job.from_json({"id": "a"})


def test_nesting_is_allowed_at_the_limit_and_refused_one_past_it() -> None:
    from leasehold import _limits
    assert _limits.json_value("payload", _nested(64), _limits.PAYLOAD_BYTES_MAX) is not None
    with pytest.raises(leasehold.InvalidArgument):
        _limits.json_value("payload", _nested(65), _limits.PAYLOAD_BYTES_MAX)
    assert _limits.json_depth('["[[[", {"a": "]"}]') == 2


def test_a_worker_refuses_a_handler_of_the_other_kind_and_bad_settings() -> None:
    async def async_handler(lease: object) -> None:
        return None

    with leasehold.Client("127.0.0.1:1") as c:
        with pytest.raises(leasehold.InvalidArgument):
            leasehold.Worker(c, "q", async_handler)
        with pytest.raises(leasehold.InvalidArgument):
            leasehold.Worker(c, "q", lambda lease: None, concurrency=0)
        with pytest.raises(leasehold.InvalidArgument):
            leasehold.Worker(c, "Q", lambda lease: None)
        w = leasehold.Worker(c, "q", lambda lease: None)
        assert w.owner and w.ttl_ms == 30_000


def test_every_public_name_has_a_docstring() -> None:
    import inspect

    from leasehold.fence import postgres

    missing = []
    for mod, names in ((leasehold, leasehold.__all__), (postgres, postgres.__all__)):
        for name in names:
            obj = getattr(mod, name)
            if not inspect.getdoc(obj):
                missing.append(name)
            if inspect.isclass(obj):
                for attr, member in vars(obj).items():
                    if not attr.startswith("_") and callable(member) and not inspect.getdoc(member):
                        missing.append(f"{name}.{attr}")
    assert not missing, missing


def test_the_cleanup_window_is_a_tenth_of_the_ttl_up_to_its_cap() -> None:
    assert cleanup_window(600) == pytest.approx(0.06)
    assert cleanup_window(10_000) == pytest.approx(1.0)
    assert cleanup_window(50_000) == pytest.approx(5.0)
    assert cleanup_window(50_010) == pytest.approx(5.0)
    assert cleanup_window(49_990) == pytest.approx(4.999)


def test_a_renew_refused_for_a_full_idempotency_share_is_retried_not_lost() -> None:
    """429 ``idempotency_full``: nothing was applied and the lease is as live as before,
    so the keep-alive tries again (the deadline still guards it); a stale lease is lost."""
    import types

    from leasehold.lease import Lease

    fired: list[object] = []
    stub = types.SimpleNamespace(job_id="j", generation=1,
                                 _fire=lambda reason, e: fired.append((reason, e)))
    full = errors.from_body(429, {"error": {"code": "idempotency_full", "message": "m"}}, None)
    assert isinstance(full, leasehold.IdempotencyFull)
    assert Lease._renew_failed(stub, full) is False and not fired
    stale = errors.from_body(409, {"error": {"code": "stale_lease", "message": "m"}}, None)
    assert Lease._renew_failed(stub, stale) is True and len(fired) == 1
