"""The safety loop against a real cluster, for the blocking and the asyncio client:
keep-alive past the TTL, completion and release on leaving the block, checkpoints, a
cancel reaching the block within one renew interval (and no renew after it), and every
node SIGSTOPped → ``lease.cancelled`` set before the store's expiry."""

from __future__ import annotations

import asyncio
import time

import pytest

import leasehold
from cluster import Cluster, wait_for

#: Slack for a loaded two-core machine on top of a bound the client promises.
SLACK = 0.5


class Boom(Exception):
    pass


def test_the_keep_alive_holds_a_lease_past_its_ttl_and_the_exit_completes(
    client: leasehold.Client,
) -> None:
    client.submit("long", payload={"n": 2})
    lease = client.claim("long", owner="w", ttl_ms=600)
    first_until = lease.lease_until_ms
    with lease:
        # The work takes more than two TTLs: only renewing keeps the lease.
        assert not lease.cancelled.wait(1.5), lease.cancel_reason
        lease.result = {"done": True}
    assert lease.lease_until_ms is not None and first_until is not None
    assert lease.lease_until_ms > first_until
    assert lease.job is not None and lease.job.state == "completed"
    assert client.get_job("long").result == {"done": True}


def test_an_exception_releases_as_a_failed_attempt_and_the_checkpoint_survives(
    client: leasehold.Client,
) -> None:
    client.submit("chk", payload="data")
    lease = client.claim("chk", owner="w", ttl_ms=900)
    with pytest.raises(Boom):
        with lease:
            lease.progress = {"step": 3}
            # The keep-alive carries it with its next renew (within ttl/3).
            wait_for("the progress on the job",
                     lambda: client.get_job("chk").progress == {"step": 3}, 5.0)
            raise Boom("disk full")
    job = client.get_job("chk")
    assert job.state == "pending" and job.last_error == "Boom: disk full"
    again = client.claim("chk", owner="w2", ttl_ms=900)
    assert again.checkpoint == {"step": 3} and again.progress == {"step": 3}
    assert again.progress_generation == lease.generation
    assert again.attempts == 2 and again.payload == "data"
    assert again.generation == lease.generation + 1


def test_a_cancel_reaches_the_block_within_one_renew_interval_and_is_final(
    client: leasehold.Client,
) -> None:
    client.submit("cx")
    lease = client.claim("cx", owner="w", ttl_ms=1500)
    with lease:
        cancelled_at = time.monotonic()
        client.cancel("cx", reason="operator")
        assert lease.cancelled.wait(lease.renew_every + SLACK), "no cancel within one interval"
        heard_at = time.monotonic()
        assert lease.cancel_reason == "cancelled" and lease.cancel_requested
        assert heard_at - cancelled_at <= lease.renew_every + SLACK
        until = client.get_job("cx").lease_until_ms
        # Final: over the next two renew intervals, nothing renews the lease.
        assert not _renewed_within(client, "cx", until, 2 * lease.renew_every)
        assert time.monotonic() < lease.deadline, "the block still has its lease"
    assert lease.job is not None and lease.job.state == "cancelled"
    assert client.get_job("cx").state == "cancelled"


def _renewed_within(client: leasehold.Client, job_id: str, until: int | None,
                    window: float) -> bool:
    """Whether the job's lease_until_ms moves past ``until`` within ``window`` seconds."""
    end = time.monotonic() + window
    while time.monotonic() < end:
        if client.get_job(job_id).lease_until_ms != until:
            return True
        time.sleep(0.05)
    return False


def test_with_every_node_stopped_cancelled_is_set_before_the_store_expiry(
    cluster: Cluster, client: leasehold.Client,
) -> None:
    ttl_ms = 1500
    lease = client.claim("frozen", owner="w", ttl_ms=ttl_ms)
    first_until = lease.lease_until_ms or 0
    with lease:
        # Stop the nodes after a renew, so the deadline is the renewed one.
        wait_for("a first renew", lambda: (lease.lease_until_ms or 0) > first_until, 5.0)
        for i in cluster.ports:
            cluster.pause(i)
        try:
            assert lease.cancelled.wait(ttl_ms / 1000 + SLACK), "never cancelled"
            set_at = time.monotonic()
        finally:
            for i in cluster.ports:
                cluster.resume(i)
        assert lease.cancel_reason == "deadline"
        # The store's expiry is never before the last granting send + ttl.
        store_expiry_earliest = lease.sent_at + ttl_ms / 1000
        assert set_at <= store_expiry_earliest, (set_at, store_expiry_earliest)
        assert lease.deadline <= store_expiry_earliest - 0.1
        assert set_at >= lease.stop_at, "cancelled before no renew had succeeded"
    # Never completed after the cancellation: released if still ours, else left to expire.
    assert lease.job is None or lease.job.state == "pending"
    assert client.get_job("frozen").state != "completed"


def test_entering_a_lease_the_wrong_way_or_twice_is_refused(client: leasehold.Client) -> None:
    lease = client.claim("twice", owner="w", ttl_ms=1000)
    with lease:
        pass
    with pytest.raises(RuntimeError):
        with lease:
            pass

    async def enter() -> None:
        async with lease:  # type: ignore[attr-defined]
            pass

    with pytest.raises(TypeError):
        asyncio.run(enter())


# --- the asyncio client -----------------------------------------------------------------


def test_async_lease_completes_keeps_alive_and_hears_a_cancel(cluster: Cluster) -> None:
    async def main() -> None:
        async with leasehold.AsyncClient(cluster.endpoints) as c:
            await c.submit("a1", payload={"x": 1})
            lease = await c.claim("a1", owner="aw", ttl_ms=600)
            assert isinstance(lease.cancelled, asyncio.Event)
            async with lease:
                await asyncio.sleep(1.5)  # the work: longer than two TTLs
                assert not lease.cancelled.is_set(), lease.cancel_reason
                lease.result = "ok"
            assert lease.job is not None and lease.job.state == "completed"
            assert lease.job.result == "ok"

            await c.submit("a2")
            lease = await c.claim("a2", owner="aw", ttl_ms=1500)
            async with lease:
                t0 = time.monotonic()
                await c.cancel("a2")
                await asyncio.wait_for(lease.cancelled.wait(), lease.renew_every + SLACK)
                assert time.monotonic() - t0 <= lease.renew_every + SLACK
                assert lease.cancel_reason == "cancelled"
            assert (await c.get_job("a2")).state == "cancelled"

            await c.submit("a3")
            lease = await c.claim("a3", owner="aw", ttl_ms=1000)
            with pytest.raises(Boom):
                async with lease:
                    raise Boom("async")
            job = await c.get_job("a3")
            assert job.state == "pending" and job.last_error == "Boom: async"

    asyncio.run(main())


def test_async_with_every_node_stopped_cancelled_is_set_before_the_store_expiry(
    cluster: Cluster,
) -> None:
    ttl_ms = 1500

    async def main() -> None:
        async with leasehold.AsyncClient(cluster.endpoints) as c:
            lease = await c.claim("afrozen", owner="aw", ttl_ms=ttl_ms)
            async with lease:
                for i in cluster.ports:
                    cluster.pause(i)
                try:
                    await asyncio.wait_for(lease.cancelled.wait(), ttl_ms / 1000 + SLACK)
                    set_at = time.monotonic()
                finally:
                    for i in cluster.ports:
                        cluster.resume(i)
                assert lease.cancel_reason == "deadline"
                assert lease.stop_at <= set_at <= lease.sent_at + ttl_ms / 1000
            assert lease.job is None or lease.job.state == "pending"

    asyncio.run(main())
