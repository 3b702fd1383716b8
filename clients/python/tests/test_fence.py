"""The README's worked example, end to end, with a real PostgreSQL server: worker A
claims (token g) and is SIGSTOPped past its lease; B claims (token g+1) and writes
through the fence; A resumes: its completion gets ``stale_lease`` and its delayed
UPDATE is rejected by PostgreSQL."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import psycopg
import pytest

import leasehold
from cluster import Cluster, wait_for
from leasehold.fence import postgres as fence

TTL_MS = 1000

#: Worker A: claims, reports its token, then (as if paused between deciding and
#: writing) waits for a line on stdin before its write and its completion.
WORKER_A = r'''
import json, sys
import psycopg
import leasehold
from leasehold.fence import postgres as fence

endpoints, dsn = sys.argv[1].split(","), sys.argv[2]
client = leasehold.Client(endpoints)
lease = client.claim("invoice-7", owner="worker-a", ttl_ms=int(sys.argv[3]))
print(json.dumps({"token": lease.token}), flush=True)
sys.stdin.readline()                     # ... SIGSTOPped here, long past the lease ...
out = {}
with psycopg.connect(dsn) as conn:
    try:
        fence.fenced_write(conn, "invoice-7", lease.token, lambda cur: cur.execute(
            "UPDATE invoices SET status = 'sent-by-a', token = %s WHERE id = 7",
            (lease.token,)))
        out["write"] = "applied"
    except fence.StaleToken as e:
        out["write"], out["highest"] = "rejected", e.highest
try:
    client.complete("invoice-7", owner="worker-a", generation=lease.token)
    out["complete"] = "ok"
except leasehold.LeaseholdError as e:
    out["complete"] = e.code
print(json.dumps(out), flush=True)
'''


@pytest.fixture
def db(postgres_dsn: str) -> str:
    with psycopg.connect(postgres_dsn) as conn:
        fence.install(conn)
        conn.execute("CREATE TABLE invoices (id int PRIMARY KEY, status text, token bigint)")
        conn.execute("INSERT INTO invoices VALUES (7, 'new', NULL)")
    return postgres_dsn


def _invoice(dsn: str) -> tuple[str, int | None]:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT status, token FROM invoices WHERE id = 7").fetchone()
    assert row is not None
    return row[0], row[1]


def test_the_worked_example_a_paused_worker_is_fenced_by_postgres(
    cluster: Cluster, client: leasehold.Client, db: str,
) -> None:
    a = subprocess.Popen(
        [sys.executable, "-c", WORKER_A, ",".join(cluster.endpoints), db, str(TTL_MS)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert a.stdout is not None and a.stdin is not None
        token_a = json.loads(a.stdout.readline())["token"]
        a.send_signal(signal.SIGSTOP)
        lease_b = wait_for("A's lease to expire on the store", lambda: _try_claim(client), 15)
        assert lease_b.token == token_a + 1
        with lease_b, psycopg.connect(db) as conn:
            assert fence.fenced_write(conn, "invoice-7", lease_b.token, lambda cur: cur.execute(
                "UPDATE invoices SET status = 'sent-by-b', token = %s WHERE id = 7",
                (lease_b.token,)))
            # A wakes up while B still holds the job.
            a.send_signal(signal.SIGCONT)
            a.stdin.write("go\n")
            a.stdin.flush()
            result = json.loads(a.stdout.readline())
            assert a.wait(timeout=30) == 0
        assert lease_b.job is not None and lease_b.job.state == "completed"
    finally:
        if a.poll() is None:
            a.send_signal(signal.SIGCONT)
            a.kill()
            a.wait()
    assert result == {"write": "rejected", "highest": token_a + 1, "complete": "stale_lease"}
    assert _invoice(db) == ("sent-by-b", token_a + 1)


def _try_claim(client: leasehold.Client) -> leasehold.Lease | None:  # type: ignore[type-arg]
    try:
        return client.claim("invoice-7", owner="worker-b", ttl_ms=5000)
    except leasehold.LeaseHeld:
        time.sleep(0.05)
        return None


def test_the_fence_drops_a_duplicate_key_and_accepts_the_same_token_again(db: str) -> None:
    with psycopg.connect(db) as conn:
        conn.execute("CREATE TABLE counter (n int)")
        conn.execute("INSERT INTO counter VALUES (0)")
        conn.commit()

        def bump(cur: psycopg.Cursor) -> None:  # type: ignore[type-arg]
            cur.execute("UPDATE counter SET n = n + 1")

        assert fence.fenced_write(conn, "c", 5, bump, idempotency_key="k1")
        assert not fence.fenced_write(conn, "c", 5, bump, idempotency_key="k1")
        assert fence.fenced_write(conn, "c", 5, bump)  # the same lease writes again
        assert fence.fenced_write(conn, "c", 6, bump, idempotency_key="k2")
        with pytest.raises(fence.StaleToken) as e:
            fence.fenced_write(conn, "c", 5, bump, idempotency_key="k3")
        assert e.value.highest == 6
        # The rejected write changed nothing, its key included: k3 is still unused.
        assert conn.execute("SELECT n FROM counter").fetchone() == (3,)
        assert fence.highest_token(conn, "c") == 6
        assert fence.fenced_write(conn, "c", 7, bump, idempotency_key="k3")
        with pytest.raises(ValueError):
            fence.fenced_write(conn, "", 7, bump)


def test_a_failing_write_rolls_back_the_token_too(db: str) -> None:
    with psycopg.connect(db) as conn:
        def broken(cur: psycopg.Cursor) -> None:  # type: ignore[type-arg]
            cur.execute("UPDATE no_such_table SET x = 1")

        with pytest.raises(psycopg.errors.UndefinedTable):
            fence.fenced_write(conn, "r", 9, broken, idempotency_key="kk")
        conn.rollback()
        assert fence.highest_token(conn, "r") is None


def test_the_async_fence(db: str) -> None:
    import asyncio

    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(db) as conn:
            await fence.install_async(conn)

            async def write(cur: psycopg.AsyncCursor) -> None:  # type: ignore[type-arg]
                await cur.execute("UPDATE invoices SET status = 'async' WHERE id = 7")

            assert await fence.fenced_write_async(conn, "inv", 3, write, idempotency_key="a")
            assert not await fence.fenced_write_async(conn, "inv", 3, write, idempotency_key="a")
            with pytest.raises(fence.StaleToken):
                await fence.fenced_write_async(conn, "inv", 2, write)

    asyncio.run(main())
    assert _invoice(db)[0] == "async"
