"""Retries through a leader SIGKILL: every logical call keeps one ``Idempotency-Key``
across its attempts, so a write retried after its answer was lost is applied once."""

from __future__ import annotations

import asyncio
import logging
import random
import re
import threading

import pytest

import leasehold
from cluster import Cluster

CALLS = 40


def _submit_all(client: leasehold.Client, rng: random.Random, out: list[object],
                started: threading.Event) -> None:
    for i in range(CALLS):
        if i == 5:
            started.set()
        try:
            out.append(client.submit(queue="failover", payload={"i": i, "r": rng.random()}))
        except leasehold.OutcomeUnknown as e:
            out.append(e)


def test_writes_through_a_leader_sigkill_are_applied_once(
    cluster: Cluster, rng: random.Random, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="leasehold.transport")
    leader = cluster.wait_leader()
    # The client's first endpoint is the leader: the kill lands on the node it talks to.
    order = [cluster.endpoint(leader)] + [e for e in cluster.endpoints
                                          if e != cluster.endpoint(leader)]
    results: list[object] = []
    started = threading.Event()
    with leasehold.Client(order) as client:
        t = threading.Thread(target=_submit_all, args=(client, rng, results, started))
        t.start()
        assert started.wait(30)
        cluster.kill(leader)
        t.join(120)
        assert not t.is_alive()
        jobs = [r for r in results if isinstance(r, leasehold.Job)]
        unknown = [r for r in results if not isinstance(r, leasehold.Job)]
        # An unknown outcome is never a failure, and never a duplicate either.
        listed = list(client.iter_jobs(queue="failover", limit=7))
    assert len(results) == CALLS
    assert len({j.id for j in jobs}) == len(jobs)
    assert {j.id for j in jobs} <= {j.id for j in listed}
    assert len(jobs) <= len(listed) <= len(jobs) + len(unknown), (len(listed), len(jobs))
    assert sorted(j.payload["i"] for j in listed) == sorted(set(j.payload["i"] for j in listed)), \
        "a logical call was applied twice"
    retried = _retried_keys(caplog)
    assert retried, "the kill never made a call retry: the test proved nothing"


def _retried_keys(caplog: pytest.LogCaptureFixture) -> dict[str, int]:
    """Key → attempts that were not final, from the transport's DEBUG records."""
    keys: dict[str, int] = {}
    for r in caplog.records:
        m = re.search(r"POST /v1/jobs attempt (\d+) \(key ([0-9a-f]{32})\)", r.getMessage())
        if m:
            keys[m.group(2)] = max(keys.get(m.group(2), 0), int(m.group(1)))
    return keys


def test_a_callers_key_survives_a_leader_sigkill(cluster: Cluster) -> None:
    leader = cluster.wait_leader()
    key = leasehold.new_idempotency_key()
    with leasehold.Client([cluster.endpoint(leader)] + cluster.endpoints) as client:
        cluster.kill(leader)
        first = client.submit(queue="keyed", payload={"n": 1}, idempotency_key=key)
        again = client.submit(queue="keyed", payload={"n": 1}, idempotency_key=key)
        assert again.id == first.id
        assert [j.id for j in client.iter_jobs(queue="keyed")] == [first.id]


def test_the_async_client_rides_out_a_leader_sigkill(cluster: Cluster) -> None:
    leader = cluster.wait_leader()

    async def main() -> None:
        eps = [cluster.endpoint(leader)] + cluster.endpoints
        async with leasehold.AsyncClient(eps) as c:
            before = await c.submit(queue="akill")
            cluster.kill(leader)
            after = await c.submit(queue="akill")
            ids = [j.id async for j in c.iter_jobs(queue="akill")]
            assert sorted(ids) == sorted([before.id, after.id])
            status = await c.cluster_status()
            assert status.leader_id not in (None, leader)

    asyncio.run(main())
