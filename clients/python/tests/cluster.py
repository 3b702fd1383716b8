"""A real three-node Leasehold cluster for the tests, started from the built binary
(``LEASEHOLD_BIN``, default ``<repo>/target/release/leasehold``) on free loopback
ports in a temp dir, as ``bench/compare.sh`` starts one. Every wait is bounded and
waits for a condition (a leader known to every live node), never for a fixed time.
:meth:`Cluster.close` continues stopped nodes, kills every process and removes the dir.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import httpx

T = TypeVar("T")

REPO = Path(__file__).resolve().parents[3]
#: Bound of every wait for a leader (seconds): generous, for a loaded 2-core machine.
LEADER_WAIT = 30.0


def binary() -> Path:
    """The ``leasehold`` binary the tests start."""
    return Path(os.environ.get("LEASEHOLD_BIN", REPO / "target" / "release" / "leasehold"))


def free_port() -> int:
    """A loopback port free right now (the OS picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(what: str, cond: Callable[[], T | None], timeout: float, every: float = 0.05) -> T:
    """Polls ``cond`` until it returns something truthy, at most ``timeout`` seconds;
    fails the test naming ``what`` otherwise."""
    until = time.monotonic() + timeout
    while True:
        out = cond()
        if out:
            return out
        if time.monotonic() > until:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(every)


class Cluster:
    """Three ``leasehold serve`` processes forming one cluster."""

    def __init__(self, size: int = 3, extra_args: list[str] | None = None,
                 token: str | None = None, ca_file: str | None = None) -> None:
        self.bin = binary()
        if not self.bin.exists():
            raise FileNotFoundError(f"no leasehold binary at {self.bin} (set LEASEHOLD_BIN)")
        self.dir = Path(tempfile.mkdtemp(prefix="leasehold-pytest-"))
        self.ports = {i: free_port() for i in range(1, size + 1)}
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.stopped: set[int] = set()
        self.extra_args = extra_args or []
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.scheme = "https" if ca_file else "http"
        verify = ssl.create_default_context(cafile=ca_file) if ca_file else True
        self._http = httpx.Client(timeout=1.0, trust_env=False, headers=headers, verify=verify)
        for i in self.ports:
            self.start(i)

    @property
    def endpoints(self) -> list[str]:
        """``127.0.0.1:PORT`` of every node, node 1 first."""
        return [f"127.0.0.1:{p}" for p in self.ports.values()]

    def endpoint(self, i: int) -> str:
        """Node ``i``'s ``127.0.0.1:PORT``."""
        return f"127.0.0.1:{self.ports[i]}"

    def start(self, i: int) -> None:
        """Starts (or restarts, on its data dir) node ``i``."""
        peers = [a for j, p in self.ports.items() for a in ("--peer", f"{j}=127.0.0.1:{p}")]
        log = open(self.dir / f"node{i}.log", "ab")
        self.procs[i] = subprocess.Popen(
            [str(self.bin), "serve", "--id", str(i), "--listen", self.endpoint(i),
             "--data-dir", str(self.dir / f"n{i}"), "--worker-threads", "1", *peers, *self.extra_args],
            stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "RUST_LOG": "warn"},
        )
        log.close()

    def status(self, i: int) -> dict[str, object] | None:
        """Node ``i``'s ``/v1/cluster``, or None when it does not answer."""
        try:
            r = self._http.get(f"{self.scheme}://{self.endpoint(i)}/v1/cluster")
            return r.json() if r.status_code == 200 else None  # type: ignore[no-any-return]
        except (httpx.HTTPError, ValueError):
            return None

    def live(self) -> list[int]:
        """Nodes running and not stopped."""
        return [i for i, p in self.procs.items() if p.poll() is None and i not in self.stopped]

    def wait_leader(self, timeout: float = LEADER_WAIT) -> int:
        """Waits until every live node names the same live leader; returns its id."""
        def agreed() -> int | None:
            seen = {(s or {}).get("leader_id") for s in map(self.status, self.live())}
            leader = next(iter(seen)) if len(seen) == 1 else None
            return leader if isinstance(leader, int) and leader in self.live() else None
        return wait_for("a leader every live node agrees on", agreed, timeout)

    def wait_version(self, version: int = 4, timeout: float = LEADER_WAIT) -> None:
        """Waits until every live node reports ``cluster_version >= version`` (4: the
        cluster serves version 1.1's lifecycle, and a claim carries payload and attempts)."""
        def ready() -> bool:
            versions = [(s or {}).get("cluster_version") for s in map(self.status, self.live())]
            return all(isinstance(v, int) and v >= version for v in versions)
        wait_for(f"cluster_version {version} on every live node", ready, timeout)

    def kill(self, i: int) -> None:
        """SIGKILLs node ``i`` and reaps it."""
        self.procs[i].send_signal(signal.SIGKILL)
        self.procs[i].wait(timeout=10)

    def pause(self, i: int) -> None:
        """SIGSTOPs node ``i``."""
        self.procs[i].send_signal(signal.SIGSTOP)
        self.stopped.add(i)

    def resume(self, i: int) -> None:
        """SIGCONTs node ``i``."""
        self.procs[i].send_signal(signal.SIGCONT)
        self.stopped.discard(i)

    def close(self) -> None:
        """Kills every node (continuing stopped ones first) and removes the temp dir."""
        for i, p in self.procs.items():
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.send_signal(signal.SIGKILL)
                p.wait(timeout=10)
        self._http.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def logs(self) -> str:
        """The tail of every node's log, for a failure message."""
        out = []
        for f in sorted(self.dir.glob("node*.log")):
            out.append(f"--- {f.name}\n" + f.read_text(errors="replace")[-3000:])
        return "\n".join(out)
