"""``leasehold.Worker`` in a subprocess under SIGTERM and SIGINT: it stops claiming,
lets the running handlers finish within their leases (their jobs complete), and exits 0,
logging what it did."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import leasehold
from cluster import wait_for

WORKER = r'''
import logging, os, sys, threading, time
import leasehold

logging.basicConfig(level=logging.INFO, stream=sys.stderr)
gate = sys.argv[2]
out = threading.Lock()  # print() from two handler threads would interleave its pieces

def handler(lease):
    with out:
        print("started", lease.job_id, flush=True)
    # The work: until the test opens the gate, never past the lease.
    while not os.path.exists(os.path.join(gate, lease.job_id)):
        if lease.cancelled.wait(0.02):
            return None
    return {"by": "worker"}

client = leasehold.Client(sys.argv[1].split(","))
leasehold.Worker(client, "jobs", handler, owner="py-worker", concurrency=2,
                 ttl_ms=3000, poll_ms=200).run()
print("exited", flush=True)
'''


ASYNC_WORKER = r'''
import asyncio, logging, os, sys
import leasehold

logging.basicConfig(level=logging.INFO, stream=sys.stderr)
gate = sys.argv[2]

async def handler(lease):
    print("started", lease.job_id, flush=True)
    while not os.path.exists(os.path.join(gate, lease.job_id)):
        try:
            await asyncio.wait_for(lease.cancelled.wait(), 0.02)
            return None
        except asyncio.TimeoutError:
            pass
    return {"by": "worker"}

client = leasehold.AsyncClient(sys.argv[1].split(","))
leasehold.Worker(client, "jobs", handler, owner="py-worker", concurrency=2,
                 ttl_ms=3000, poll_ms=200).run()
print("exited", flush=True)
'''


def _started(proc: subprocess.Popen[str]) -> str:
    """The job id of the worker's next "started <id>" line; fails with the worker's
    stderr when it printed something else or exited."""
    assert proc.stdout is not None
    line = proc.stdout.readline()
    words = line.split()
    if len(words) == 2 and words[0] == "started":
        return words[1]
    proc.kill()
    _, err = proc.communicate(timeout=30)
    pytest.fail(f"expected 'started <id>' from the worker, got {line!r}; stderr:\n{err}")


@pytest.mark.parametrize("sig,script", [
    (signal.SIGTERM, WORKER), (signal.SIGINT, WORKER), (signal.SIGTERM, ASYNC_WORKER),
], ids=["sigterm", "sigint", "async-sigterm"])
def test_the_worker_finishes_running_jobs_and_stops_claiming_on_a_signal(
    client: leasehold.Client, tmp_path: Path, sig: signal.Signals, script: str,
) -> None:
    for i in range(5):
        client.submit(f"job-{i}", queue="jobs")
    proc = subprocess.Popen(
        [sys.executable, "-c", script, ",".join(client.endpoints), str(tmp_path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stdout is not None
        started = [_started(proc) for _ in range(2)]
        proc.send_signal(sig)
        # Stopping waits for the two running handlers: still alive a while later.
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=1.0)
        for job_id in started:
            (tmp_path / job_id).touch()
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert out.strip().endswith("exited")
    assert f"got {sig.name}" in err and "2 completed" in err, err
    jobs = {j.id: j for j in client.iter_jobs(queue="jobs")}
    for job_id in started:
        assert jobs[job_id].state == "completed" and jobs[job_id].result == {"by": "worker"}
    rest = [j for j in jobs.values() if j.id not in started]
    assert len(rest) == 3 and all(j.state == "pending" for j in rest), rest


def _readme_worker() -> str:
    """The README's worker block, verbatim."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    block = readme.split("## A worker\n\n```python\n", 1)[1]
    return block.split("```\n", 1)[0]


def test_the_readme_worker_runs_jobs_resuming_from_a_checkpoint(
    client: leasehold.Client,
) -> None:
    client.submit("fresh", payload={"count": 3})
    client.submit("resumed", payload={"count": 4})
    lease = client.claim("resumed", owner="earlier", ttl_ms=1000)
    client.renew("resumed", owner="earlier", generation=lease.generation, progress=2)
    client.release("resumed", owner="earlier", generation=lease.generation)
    env = {**os.environ, "LEASEHOLD_ENDPOINTS": ",".join(client.endpoints)}
    env.pop("LEASEHOLD_TOKEN", None)
    proc = subprocess.Popen([sys.executable, "-c", _readme_worker()], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for("both jobs completed", lambda: all(
            client.get_job(j).state == "completed" for j in ("fresh", "resumed")), 30)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert client.get_job("fresh").result == {"steps": 3}
    steps = [line for line in out.splitlines() if line.startswith("resumed:")]
    assert [s.split(",")[0] for s in steps] == ["resumed: step 2", "resumed: step 3"], out
