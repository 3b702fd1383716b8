"""Every call of the client against a real three-node cluster: answers decoded into the
typed objects, errors into their classes (with the job they are about)."""

from __future__ import annotations

from pathlib import Path

import pytest

import leasehold
from cluster import Cluster


def _skip_if_no_route(e: leasehold.NotFound) -> None:
    if "route" in e.message or "/history" in e.message:
        pytest.skip("GET /v1/jobs/{id}/history and GET /v1/events are not served by this "
                    f"build yet (404: {e.message}); they land with the lifecycle work")


def test_jobs_submit_get_list_iterate_delete(client: leasehold.Client) -> None:
    job = client.submit("invoice-1", queue="mail", payload={"n": 1}, priority=5, max_attempts=3)
    assert (job.id, job.queue, job.state, job.payload, job.priority) == (
        "invoice-1", "mail", "pending", {"n": 1}, 5)
    assert job.max_attempts == 3 and job.generation == 0
    assert client.get_job("invoice-1") == job
    generated = client.submit(queue="mail")
    assert generated.id and generated.id != "invoice-1"
    with pytest.raises(leasehold.AlreadyExists) as e:
        client.submit("invoice-1", queue="mail")
    assert e.value.status == 409 and e.value.job is not None and e.value.job.id == "invoice-1"
    for i in range(5):
        client.submit(f"page-{i}", queue="paged")
    page = client.list_jobs(queue="paged", limit=2)
    assert len(page.jobs) == 2 and page.next_page_token is not None
    assert sorted(j.id for j in client.iter_jobs(queue="paged", limit=2)) == [
        f"page-{i}" for i in range(5)]
    client.delete_job("page-0")
    with pytest.raises(leasehold.NotFound):
        client.get_job("page-0")
    with pytest.raises(leasehold.NotFound):
        client.delete_job("page-0")


def test_ids_with_slashes_address_their_own_job(client: leasehold.Client) -> None:
    lease = client.claim("a/b/claim", owner="w-1", ttl_ms=5000)
    assert lease.job_id == "a/b/claim"
    assert client.get_job("a/b/claim").state == "leased"


def test_claim_complete_and_the_fencing_errors(client: leasehold.Client) -> None:
    client.submit("j1", payload=[1, 2])
    lease = client.claim("j1", owner="worker-a", ttl_ms=5000)
    assert (lease.generation, lease.token, lease.owner, lease.ttl_ms) == (1, 1, "worker-a", 5000)
    assert lease.payload == [1, 2] and lease.attempts == 1 and lease.checkpoint is None
    assert lease.deadline <= lease.sent_at + 5.0 - 0.1 + 1e-9
    with pytest.raises(leasehold.LeaseHeld):
        client.claim("j1", owner="worker-b", ttl_ms=5000)
    renewed = client.renew("j1", owner="worker-a", generation=1, ttl_ms=6000)
    assert renewed.ttl_ms == 6000 and renewed.generation == 1
    with pytest.raises(leasehold.StaleLease) as e:
        client.complete("j1", owner="worker-a", generation=2)
    assert e.value.job is not None and e.value.job.generation == 1
    done = client.complete("j1", owner="worker-a", generation=1, result={"ok": True})
    assert (done.state, done.result, done.owner) == ("completed", {"ok": True}, "worker-a")
    with pytest.raises(leasehold.JobCompleted):
        client.claim("j1", owner="worker-b", ttl_ms=5000)


def test_claim_next_release_fail_retry_redrive(client: leasehold.Client) -> None:
    assert client.claim_next("empty", owner="w", ttl_ms=1000) is None
    assert client.claim_next("empty", owner="w", ttl_ms=1000, wait_ms=300) is None
    client.submit("r1", queue="work", payload="p")
    lease = client.claim_next("work", owner="w", ttl_ms=2000)
    assert lease is not None and lease.job_id == "r1" and lease.payload == "p"
    job = client.release("r1", owner="w", generation=lease.generation, retry=True,
                         error="boom", delay_ms=0)
    assert job.state == "pending" and job.last_error == "boom"
    lease = client.claim("r1", owner="w", ttl_ms=2000)
    assert lease.attempts == 2
    failed = client.fail("r1", owner="w", generation=lease.generation, error="dead")
    assert failed.state == "failed" and failed.last_error == "dead"
    assert [j.id for j in client.iter_jobs(queue="work", state="failed")] == ["r1"]
    assert client.retry("r1").state == "pending"
    with pytest.raises(leasehold.InvalidState):
        client.retry("r1")
    lease = client.claim("r1", owner="w", ttl_ms=2000)
    client.fail("r1", owner="w", generation=lease.generation)
    assert client.redrive("work", limit=10) == 1
    assert client.get_job("r1").state == "pending"


def test_cancel_of_a_pending_job_and_scheduling(client: leasehold.Client) -> None:
    client.submit("c1")
    job = client.cancel("c1", reason="not needed")
    assert job.state == "cancelled" and job.cancel_reason == "not needed"
    with pytest.raises(leasehold.JobCancelled):
        client.claim("c1", owner="w", ttl_ms=1000)
    now = client.cluster_status().cluster_time_ms
    client.submit("later", run_at_ms=now + 3_600_000)
    with pytest.raises(leasehold.NotDue):
        client.claim("later", owner="w", ttl_ms=1000)


def test_a_caller_key_makes_a_repeated_submit_apply_once(client: leasehold.Client) -> None:
    key = leasehold.new_idempotency_key()
    first = client.submit(queue="once", payload={"k": 1}, idempotency_key=key)
    again = client.submit(queue="once", payload={"k": 1}, idempotency_key=key)
    assert again.id == first.id
    assert [j.id for j in client.iter_jobs(queue="once")] == [first.id]
    with pytest.raises(leasehold.IdempotencyKeyReused):
        client.submit(queue="once", payload={"k": 2}, idempotency_key=key)


def test_cluster_status_and_from_env(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEASEHOLD_ENDPOINTS", ",".join(cluster.endpoints))
    monkeypatch.delenv("LEASEHOLD_TOKEN", raising=False)
    with leasehold.Client.from_env() as c:
        assert c.endpoints == [f"http://{e}" for e in cluster.endpoints]
        status = c.cluster_status()
    assert status.leader_id in (1, 2, 3) and sorted(status.voters) == [1, 2, 3]


def _events_on(cluster: Cluster, client: leasehold.Client) -> None:
    """Waits for entry version 5 (history and the feed) when the binary has it."""
    if int(client.cluster_status().extra.get("entry_version_max", 0)) >= 5:
        cluster.wait_version(5)


def test_history_of_a_job(cluster: Cluster, client: leasehold.Client) -> None:
    _events_on(cluster, client)
    client.submit("h1")
    lease = client.claim("h1", owner="w", ttl_ms=2000)
    client.complete("h1", owner="w", generation=lease.generation)
    try:
        events = client.history("h1")
    except leasehold.NotFound as e:
        _skip_if_no_route(e)
        raise
    assert [e.event for e in events] == ["submitted", "claimed", "completed"]
    assert all(a.seq < b.seq for a, b in zip(events, events[1:]))
    assert events[1].generation == 1 and events[1].owner == "w"
    assert {e.job_id for e in events} == {"h1"} and events[0].queue == "default"
    # A job id with a slash is one path segment; a job that never existed is 404.
    client.claim("a/history", owner="w", ttl_ms=2000)
    assert [e.event for e in client.history("a/history")] == ["submitted", "claimed"]
    with pytest.raises(leasehold.NotFound):
        client.history("never-was")


def test_the_event_feed(cluster: Cluster, client: leasehold.Client) -> None:
    _events_on(cluster, client)
    client.submit("e1", queue="feed")
    try:
        first = next(iter(client.events(queue="feed", follow=False)))
    except leasehold.NotFound as e:
        _skip_if_no_route(e)
        raise
    assert (first.job_id, first.event) == ("e1", "submitted")
    client.submit("e2", queue="feed")
    follow = client.events(after=first.seq, queue="feed", wait_ms=5000)
    nxt = next(follow)
    assert (nxt.job_id, nxt.event) == ("e2", "submitted") and nxt.seq > first.seq
    # A follower waits on the server for the next matching event.
    lease = client.claim("e2", owner="w", ttl_ms=2000)
    claimed = next(follow)
    assert (claimed.event, claimed.generation, claimed.owner) == ("claimed", lease.token, "w")
    only_e1 = [e.event for e in client.events(job_id="e1", follow=False)]
    assert only_e1 == ["submitted"]


def test_a_bearer_token_is_sent_on_every_call(tmp_path: Path) -> None:
    auth = tmp_path / "auth.toml"
    auth.write_text('[[token]]\ntoken = "s3cr3t-admin"\nrole = "admin"\n')
    auth.chmod(0o600)
    c = Cluster(extra_args=["--auth-file", str(auth)], token="s3cr3t-admin")
    try:
        c.wait_leader()
        with leasehold.Client(c.endpoints) as anonymous:
            with pytest.raises(leasehold.Unauthenticated) as e:
                anonymous.submit("t1")
            assert e.value.status == 401
        with leasehold.Client(c.endpoints, token="s3cr3t-admin") as client:
            lease = client.claim("t1", owner="w", ttl_ms=600)
            with lease:  # the keep-alive's renews carry the token too
                assert not lease.cancelled.wait(1.0), lease.cancel_error
            assert lease.job is not None and lease.job.state == "completed"
    finally:
        c.close()
