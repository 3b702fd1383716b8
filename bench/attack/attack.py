#!/usr/bin/env python3
"""Attack bench for issue 17 ("hostile clients and peers"): the issue's targets, measured.

Starts a secured three-node cluster (`leasehold serve` with --peer-secret-file and
--auth-file) from the given binary on free 127.0.0.1 ports in a temp dir, runs a normal
client (submit, claim-next, complete in closed loops through a follower and the leader),
takes a baseline, then runs each attack for N seconds with the client still running and
reports, per attack: the client's claim p50/p99/max, its errors by status, the p99 ratio
against the baseline, each node's peak RSS growth, an admin probe's failures, each node's
log rate, and PASS/FAIL against the targets:

    claim p99 <= 2 x baseline p99, every node's RSS growth <= 100 MiB, and no client
    error other than the documented retries (503 unavailable, 504 timeout, 502).

Python 3.11 standard library only. Traffic goes to 127.0.0.1 only. Every process this
script starts (nodes, attackers) is killed, and the temp dir removed, on exit, Ctrl-C,
SIGTERM or an exception; the children also get PR_SET_PDEATHSIG so a SIGKILLed bench
leaves nothing behind. An attack runs in a child process of its own (`--attacker`), so
its CPU use does not share a GIL with the client that is being measured.

    python3 bench/attack/attack.py --bin target/release/leasehold [--attack NAME|all]
        [--seconds 10] [--seed S] [--out results.json] [--keep] [--serve-arg=--flag=v]
    python3 bench/attack/attack.py --selftest

See bench/attack/README.md for what each attack sends and the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import http.client
import json
import math
import os
import random
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid

MIB = 1024 * 1024
# The targets.
P99_RATIO_MAX = 2.0
RSS_GROWTH_MAX_MIB = 100.0
# api.md's availability errors (plus 502 from anything in between): a client retries these.
RETRY_STATUSES = {"502", "503", "504"}
RSS_SAMPLE_S = 0.2
PROBE_EVERY_S = 0.5
# A node that grows past this is stopped from growing further: the attack is cut short
# (the machine is shared). Override with --rss-abort-mib.
RSS_ABORT_MIB_DEFAULT = 4096

ATTACKS = [
    "forged-stall",
    "forged-big",
    "idle-conns",
    "stalled-get",
    "long-poll",
    "refusal-log",
    # Last: what it leaves in the idempotency table stays for 10 minutes of cluster time.
    "idem-409",
]


# ---- small helpers ------------------------------------------------------------------

def now() -> float:
    return time.monotonic()


def percentile(values, p):
    """Nearest-rank percentile of a list (None when empty): the smallest value with at
    least p% of the values at or below it."""
    if not values:
        return None
    s = sorted(values)
    k = max(1, math.ceil(p / 100.0 * len(s)))
    return s[k - 1]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent():
    """preexec_fn: SIGKILL this child when the bench dies, however it dies."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def raise_fd_limit():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else 65536
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


def rss_kib(pid: int):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def cpu_s(pid: int):
    """User + system CPU seconds a process has used so far (None once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def machine_cpu_s():
    """The machine's CPU seconds so far by kind (user, system, softirq, idle: /proc/stat)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    tck = os.sysconf("SC_CLK_TCK")
    return {"user": (v[0] + v[1]) / tck, "system": v[2] / tck, "softirq": (v[5] + v[6]) / tck,
            "idle": (v[3] + v[4]) / tck}


def http_call(port, method, path, body=None, token=None, headers=None, timeout=5.0):
    """One request on a fresh connection: (status, parsed JSON or raw bytes, headers)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        h = dict(headers or {})
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            h["Content-Type"] = "application/json"
        if token:
            h["Authorization"] = f"Bearer {token}"
        conn.request(method, path, body=data, headers=h)
        resp = conn.getresponse()
        raw = resp.read()
        try:
            parsed = json.loads(raw) if raw else None
        except ValueError:
            parsed = raw
        return resp.status, parsed, dict(resp.getheaders())
    finally:
        conn.close()


def uptime_text() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        with open("/proc/loadavg") as f:
            return "loadavg " + f.read().strip()


# ---- the cluster --------------------------------------------------------------------

class Cluster:
    """Three `leasehold serve` processes, secured, in one temp dir."""

    def __init__(self, binary, root, serve_args, n=3):
        self.bin = binary
        self.root = root
        self.serve_args = list(serve_args)
        self.ids = list(range(1, n + 1))
        self.ports = {i: free_port() for i in self.ids}
        self.procs = {}
        self.logs = {i: os.path.join(root, f"n{i}.log") for i in self.ids}
        self.tokens = {
            "admin": "adm-" + uuid.uuid4().hex,
            "worker": "wrk-" + uuid.uuid4().hex,   # the attacker's, owner_prefix team-a/
            "reader": "rdr-" + uuid.uuid4().hex,
            "normal": "nrm-" + uuid.uuid4().hex,   # the normal client's, owner_prefix normal/
        }
        self.secret_file = os.path.join(root, "peer-secret")
        self.auth_file = os.path.join(root, "tokens.toml")
        self._write_files()

    def _write_files(self):
        fd = os.open(self.secret_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(os.urandom(32).hex())
        t = self.tokens
        toml = (
            f'[[token]]\ntoken = "{t["admin"]}"\nrole = "admin"\nname = "bench admin"\n\n'
            f'[[token]]\ntoken = "{t["worker"]}"\nrole = "worker"\nowner_prefix = "team-a/"\n'
            f'name = "attacker worker (team-a)"\n\n'
            f'[[token]]\ntoken = "{t["reader"]}"\nrole = "reader"\nname = "attacker reader"\n\n'
            f'[[token]]\ntoken = "{t["normal"]}"\nrole = "worker"\nowner_prefix = "normal/"\n'
            f'name = "normal client"\n'
        )
        fd = os.open(self.auth_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(toml)

    def start(self):
        peers = [f"--peer={i}=127.0.0.1:{self.ports[i]}" for i in self.ids]
        for i in self.ids:
            data_dir = os.path.join(self.root, f"n{i}")
            log = open(self.logs[i], "ab")
            cmd = [self.bin, "serve", f"--id={i}", f"--listen=127.0.0.1:{self.ports[i]}",
                   f"--data-dir={data_dir}", *peers,
                   f"--peer-secret-file={self.secret_file}", f"--auth-file={self.auth_file}",
                   *self.serve_args]
            self.procs[i] = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                preexec_fn=_die_with_parent, start_new_session=True)
            log.close()

    def stop(self):
        for p in self.procs.values():
            if p.poll() is None:
                p.kill()
        for p in self.procs.values():
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass

    def alive(self):
        return {i: p.poll() is None for i, p in self.procs.items()}

    def status(self, i, timeout=2.0):
        try:
            st, body, _ = http_call(self.ports[i], "GET", "/v1/cluster",
                                    token=self.tokens["admin"], timeout=timeout)
            return body if st == 200 and isinstance(body, dict) else None
        except (OSError, http.client.HTTPException):
            return None

    def ready(self, i, timeout=2.0):
        try:
            st, _, _ = http_call(self.ports[i], "GET", "/readyz", timeout=timeout)
            return st == 200
        except (OSError, http.client.HTTPException):
            return False

    def leader(self):
        """(leader id, cluster id) when every node names the same leader, else None."""
        seen = [self.status(i) for i in self.ids]
        if any(s is None for s in seen):
            return None
        leaders = {s.get("leader_id") for s in seen}
        if len(leaders) != 1 or None in leaders:
            return None
        return leaders.pop(), seen[0].get("cluster_id")

    def wait_ready(self, bound_s):
        deadline = now() + bound_s
        while now() < deadline:
            for i, ok in self.alive().items():
                if not ok:
                    raise RuntimeError(f"node {i} exited (see {self.logs[i]})")
            got = self.leader()
            if got and all(self.ready(i) for i in self.ids):
                return got
            time.sleep(0.1)
        raise RuntimeError(f"cluster not ready within {bound_s}s (logs in {self.root})")

    def rss_all(self):
        return {i: rss_kib(p.pid) for i, p in self.procs.items()}

    def cpu_all(self):
        return {i: cpu_s(p.pid) for i, p in self.procs.items()}

    def log_sizes(self):
        return {i: os.path.getsize(self.logs[i]) for i in self.ids}

    def refused_metrics(self):
        """`/metrics` lines about refusals, per node (as text; for the AFTER figures)."""
        out = {}
        for i in self.ids:
            try:
                st, body, _ = http_call(self.ports[i], "GET", "/metrics",
                                        token=self.tokens["reader"], timeout=3)
            except (OSError, http.client.HTTPException) as e:
                out[i] = [f"error: {e}"]
                continue
            text = body.decode(errors="replace") if isinstance(body, bytes) else str(body)
            out[i] = [ln for ln in text.splitlines()
                      if "refus" in ln and not ln.startswith("#") and not ln.endswith(" 0")]
        return out


# ---- samplers: RSS every 200 ms, an admin probe every 500 ms ------------------------

class Samplers:
    def __init__(self, cluster: Cluster):
        self.c = cluster
        self.stop = threading.Event()
        self.rss = []      # (t, {id: kib})
        self.probes = []   # (t, id, status label)
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._rss_loop, daemon=True),
                        threading.Thread(target=self._probe_loop, daemon=True)]

    def start(self):
        for t in self.threads:
            t.start()

    def _rss_loop(self):
        while not self.stop.is_set():
            r = self.c.rss_all()
            with self.lock:
                self.rss.append((now(), r))
            self.stop.wait(RSS_SAMPLE_S)

    def _probe_loop(self):
        while not self.stop.is_set():
            for i in self.c.ids:
                t = now()
                try:
                    st, _, _ = http_call(self.c.ports[i], "GET", "/v1/cluster",
                                         token=self.c.tokens["admin"], timeout=2)
                    label = str(st)
                except socket.timeout:
                    label = "timeout"
                except (OSError, http.client.HTTPException) as e:
                    label = type(e).__name__
                with self.lock:
                    self.probes.append((t, i, label))
            self.stop.wait(PROBE_EVERY_S)

    def rss_window(self, t0, t1):
        """{id: (start KiB, peak KiB, end KiB)} over [t0, t1]."""
        with self.lock:
            rows = list(self.rss)
        out = {}
        for i in self.c.ids:
            before = [r[i] for t, r in rows if t <= t0 and r.get(i)]
            inside = [r[i] for t, r in rows if t0 <= t <= t1 and r.get(i)]
            start = before[-1] if before else (inside[0] if inside else None)
            out[i] = (start, max(inside) if inside else None, inside[-1] if inside else None)
        return out

    def probe_failures(self, t0, t1):
        with self.lock:
            rows = [(i, s) for t, i, s in self.probes if t0 <= t <= t1]
        out = {}
        for i, s in rows:
            d = out.setdefault(str(i), {"probes": 0, "failed": {}})
            d["probes"] += 1
            if s != "200":
                d["failed"][s] = d["failed"].get(s, 0) + 1
        return out


# ---- the normal client --------------------------------------------------------------

class NormalClient:
    """Closed loops of claim-next → complete → submit, each loop pinned to one node and
    its own queue (prefilled with a backlog, so a failing submit does not stop claims), a
    fresh connection per job cycle (kept alive for its three calls). Every call has its
    own Idempotency-Key and retries 502/503/504 and connection errors like the Rust client
    (jittered backoff from 50 ms doubling to 2 s, at least Retry-After up to 5 s, 8
    attempts); a call's latency is from its first attempt to its final answer."""

    MAX_ATTEMPTS = 8
    ATTEMPT_TIMEOUT_S = 30.0

    def __init__(self, cluster, via, think_s, seed):
        self.c = cluster
        self.via = via           # one node id per loop
        self.think_s = think_s
        self.rng = random.Random(seed)
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.calls = []          # (op, loop, t_start, t_end, outcome) outcome: "ok" | error label
        self.errors = []         # (t, op, loop, label) one per failed attempt
        self.inflight = {}       # loop -> (op, t_start)
        self.threads = [threading.Thread(target=self._loop, args=(k,), daemon=True)
                        for k in range(len(via))]

    def start(self):
        for t in self.threads:
            t.start()

    def _record_error(self, op, k, label):
        with self.lock:
            self.errors.append((now(), op, k, label))

    def _call(self, k, conn_box, op, method, path, body, want):
        """One API call with retries; returns (parsed body or None, outcome)."""
        port = self.c.ports[self.via[k]]
        key = uuid.uuid4().hex
        t0 = now()
        with self.lock:
            self.inflight[k] = (op, t0)
        outcome, result = "gave_up", None
        for attempt in range(1, self.MAX_ATTEMPTS + 1):
            retry_after = 0.0
            try:
                if conn_box[0] is None:
                    conn_box[0] = http.client.HTTPConnection(
                        "127.0.0.1", port, timeout=self.ATTEMPT_TIMEOUT_S)
                conn = conn_box[0]
                conn.request(method, path, body=json.dumps(body).encode(), headers={
                    "Content-Type": "application/json", "Idempotency-Key": key,
                    "Authorization": f"Bearer {self.c.tokens['normal']}"})
                resp = conn.getresponse()
                raw = resp.read()
                status = resp.status
                if resp.getheader("Connection", "").lower() == "close":
                    conn.close()
                    conn_box[0] = None
            except socket.timeout:
                status, raw = "timeout", b""
            except (OSError, http.client.HTTPException) as e:
                status, raw = type(e).__name__, b""
            if status in want:
                outcome = "ok"
                result = json.loads(raw) if raw else None
                break
            label = str(status)
            self._record_error(op, k, label)
            if isinstance(status, int):
                if label not in RETRY_STATUSES:
                    outcome = label  # a final answer we did not expect
                    break
                if status == 503:
                    try:
                        retry_after = min(5.0, float(resp.getheader("Retry-After", "0")))
                    except ValueError:
                        retry_after = 0.0
            else:
                if conn_box[0] is not None:
                    conn_box[0].close()
                conn_box[0] = None
            if self.stop.is_set():
                outcome = "stopped"
                break
            base = min(2.0, 0.05 * (2 ** (attempt - 1)))
            time.sleep(max(base / 2 + self.rng.random() * base / 2, retry_after))
        t1 = now()
        with self.lock:
            self.inflight.pop(k, None)
            self.calls.append((op, k, t0, t1, outcome))
        return result, outcome

    def prefill(self, per_loop, port, threads=8):
        """Submits `per_loop` jobs to each loop's queue first: a backlog, so that claims go on
        (and are measured) while an attack makes submits fail."""
        todo = [(k, n) for k in range(len(self.via)) for n in range(per_loop)]
        lock = threading.Lock()
        failed = []

        def worker():
            while True:
                with lock:
                    if not todo:
                        return
                    k, n = todo.pop()
                try:
                    st, _, _ = http_call(port, "POST", "/v1/jobs",
                                         {"queue": f"normal-{k}", "payload": {"prefill": n}},
                                         self.c.tokens["normal"], timeout=10)
                except (OSError, http.client.HTTPException) as e:
                    st = type(e).__name__
                if st != 201:
                    failed.append(st)

        ts = [threading.Thread(target=worker, daemon=True) for _ in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        if failed:
            raise RuntimeError(f"prefill: {len(failed)} submits failed, e.g. {failed[:5]}")

    def _loop(self, k):
        """claim-next → complete → submit (a refill: the backlog stays about the same)."""
        queue = f"normal-{k}"
        owner = f"normal/loop-{k}"
        n = 0
        while not self.stop.is_set():
            box = [None]
            try:
                n += 1
                lease, out = self._call(k, box, "claim", "POST", f"/v1/queues/{queue}/claim",
                                        {"owner": owner, "ttl_ms": 30000}, {200, 204})
                if out == "ok" and not lease:
                    self._record_error("claim", k, "204-empty")  # the backlog ran out
                elif out == "ok":
                    self._call(k, box, "complete", "POST",
                               f"/v1/jobs/{lease['job_id']}/complete",
                               {"owner": owner, "generation": lease["generation"]}, {200})
                self._call(k, box, "submit", "POST", "/v1/jobs",
                           {"queue": queue, "payload": {"loop": k, "n": n}}, {201})
            finally:
                if box[0] is not None:
                    box[0].close()
            self.stop.wait(self.think_s)

    def window(self, t0, t1):
        """Latencies (ms), calls and errors of the calls started in [t0, t1]. A call still in
        flight at t1 counts as a latency sample of its age then (censored: a hung call must
        not vanish from the percentiles), and in `unfinished`, not as an error."""
        with self.lock:
            calls = [c for c in self.calls if t0 <= c[2] <= t1]
            errors = [e for e in self.errors if t0 <= e[0] <= t1]
            inflight = [(k, op, ts) for k, (op, ts) in self.inflight.items() if t0 <= ts <= t1]
        out = {"ops": {}, "errors": {}, "unfinished": {}}
        lat = {}
        for op, _k, ts, te, outcome in calls:
            lat.setdefault(op, []).append((te - ts) * 1000.0)
            d = out["ops"].setdefault(op, {"calls": 0, "ok": 0})
            d["calls"] += 1
            d["ok"] += outcome == "ok"
            if outcome not in ("ok", "stopped"):
                key = f"{op}:final:{outcome}"
                out["errors"][key] = out["errors"].get(key, 0) + 1
        for k, op, ts in inflight:
            lat.setdefault(op, []).append((t1 - ts) * 1000.0)
            out["unfinished"][op] = out["unfinished"].get(op, 0) + 1
        for _t, op, _k, label in errors:
            key = f"{op}:{label}"
            out["errors"][key] = out["errors"].get(key, 0) + 1
        for op, v in lat.items():
            out["ops"].setdefault(op, {"calls": 0, "ok": 0}).update(
                p50_ms=percentile(v, 50), p99_ms=percentile(v, 99), max_ms=max(v))
        return out


# ---- the attackers (run in a child process: --attacker NAME --attacker-config FILE) --

def forged_peer_head(cfg, port, length, path="/raft/append"):
    mac = os.urandom(32).hex()
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Content-Type: application/x-bincode\r\n"
            f"x-leasehold-peer-auth: v1 t={int(time.time() * 1000)} from={cfg['from_id']} "
            f"cluster={cfg['cluster_id']} mac={mac}\r\n"
            f"Content-Length: {length}\r\n\r\n").encode()


class Stats:
    def __init__(self, path):
        self.path = path
        self.d = {}

    def add(self, key, n=1):
        self.d[key] = self.d.get(key, 0) + n

    def flush(self):
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.d, f)
        os.replace(tmp, self.path)


async def read_response(reader):
    """Reads one HTTP/1.1 response; returns (status, keep-alive?)."""
    line = await reader.readline()
    if not line:
        raise ConnectionResetError("closed before a response")
    status = int(line.split()[1])
    length, chunked, close = 0, False, False
    while True:
        h = await reader.readline()
        if h in (b"\r\n", b"\n", b""):
            break
        name, _, value = h.decode("latin-1").partition(":")
        name, value = name.strip().lower(), value.strip().lower()
        if name == "content-length":
            length = int(value)
        elif name == "transfer-encoding" and "chunked" in value:
            chunked = True
        elif name == "connection" and value == "close":
            close = True
    if chunked:
        while True:
            size = int((await reader.readline()).split(b";")[0], 16)
            await reader.readexactly(size + 2)
            if size == 0:
                break
    elif length:
        await reader.readexactly(length)
    return status, not close


def json_request(port, method, path, token, body, extra=""):
    data = json.dumps(body).encode()
    return (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n{extra}"
            f"Content-Length: {len(data)}\r\n\r\n").encode() + data


async def paced(cfg, t_open):
    """Waits until `pace_ms` after `t_open`: a slot of a held-socket attack opens at most
    one socket per pace. The issue's attacks are held sockets (64, 256, 1,024 of them); a
    server that answers at once turns an unpaced reopen loop into a request flood, which
    is another attack (`--flood` runs it)."""
    left = cfg.get("pace_ms", 0) / 1000.0 - (time.monotonic() - t_open)
    if left > 0:
        await asyncio.sleep(left)


class RateCap:
    """A token bucket shared by the loops of one attack: at most `rate` requests/s
    (0: no cap), bursts of up to 1/10 s of it."""

    def __init__(self, rate):
        self.rate, self.tokens, self.t = rate, 0.0, time.monotonic()

    async def take(self):
        while self.rate:
            now = time.monotonic()
            self.tokens = min(self.rate / 10, self.tokens + (now - self.t) * self.rate)
            self.t = now
            if self.tokens >= 1:
                self.tokens -= 1
                return
            await asyncio.sleep((1 - self.tokens) / self.rate)


# The address the attacker's sockets come from (`--attacker-source`, set in run_attacker).
ATTACKER_SOURCE = "127.0.0.2"


async def connect(port):
    """An attacker's connection to a node, from ATTACKER_SOURCE."""
    return await asyncio.open_connection("127.0.0.1", port, local_addr=(ATTACKER_SOURCE, 0))


async def hold_until_closed(stats, port, make_head, tail=b"x", cfg=None):
    """Sends a head and one byte of a body it never finishes, holds the socket until the
    server answers or closes, then opens a new one (paced, see `paced`): forever."""
    while True:
        w = None
        t_open = time.monotonic()
        try:
            r, w = await connect(port)
            w.write(make_head() + tail)
            await w.drain()
            stats.add("opened")
            data = await r.read(4096)
            stats.add("answered" if data else "closed_by_server")
            if data[:12].startswith(b"HTTP/1.1 "):
                stats.add("status_" + data[9:12].decode(errors="replace"))
        except (OSError, asyncio.IncompleteReadError):
            stats.add("connect_or_io_error")
            await asyncio.sleep(0.05)
        finally:
            if w is not None:
                w.close()
        await paced(cfg or {}, t_open)


async def attack_forged_stall(cfg, stats):
    per = cfg.get("per_target", 64)
    tasks = [hold_until_closed(stats, port,
                               lambda port=port: forged_peer_head(cfg, port, 1_000_000),
                               cfg=cfg)
             for port in cfg["followers"] for _ in range(per)]
    await asyncio.gather(*tasks)


async def attack_forged_big(cfg, stats):
    size = 64 * MIB
    body = memoryview(bytes(size))
    port = cfg["big_target"]
    loop = asyncio.get_running_loop()

    async def one():
        while True:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setblocking(False)
            s.bind((ATTACKER_SOURCE, 0))
            try:
                await loop.sock_connect(s, ("127.0.0.1", port))
                await loop.sock_sendall(s, forged_peer_head(cfg, port, size))
                await loop.sock_sendall(s, body)
                stats.add("bodies_sent")
                data = await asyncio.wait_for(loop.sock_recv(s, 4096), 150)
                if data.startswith(b"HTTP/1.1 "):
                    stats.add("status_" + data[9:12].decode(errors="replace"))
            except (OSError, asyncio.TimeoutError) as e:
                stats.add("error_" + type(e).__name__)
                await asyncio.sleep(0.01)
            finally:
                s.close()

    await asyncio.gather(*(one() for _ in range(cfg.get("parallel", 16))))


async def attack_idle_conns(cfg, stats):
    async def one(port):
        while True:
            w = None
            t_open = time.monotonic()
            try:
                r, w = await connect(port)
                stats.add("opened")
                await r.read(1)
                stats.add("closed_by_server")
            except OSError:
                stats.add("connect_error")
                await asyncio.sleep(0.05)
            finally:
                if w is not None:
                    w.close()
            await paced(cfg, t_open)

    per = cfg.get("per_node", 1024)
    await asyncio.gather(*(one(p) for p in cfg["all"] for _ in range(per)))


async def attack_stalled_get(cfg, stats):
    port, token = cfg["leader"], cfg["tokens"]["reader"]

    def head():
        return (f"GET /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                f"Authorization: Bearer {token}\r\nContent-Length: 1000000\r\n\r\n").encode()

    await asyncio.gather(*(hold_until_closed(stats, port, head, cfg=cfg)
                           for _ in range(cfg.get("count", 256))))


async def keepalive_loop(stats, port, make_request, pause_after_refusal, cap=None):
    """Sends a request, reads the answer, sends the next at once (or when `cap`, a shared
    RateCap, allows); a refusal (not 2xx) waits `pause_after_refusal` seconds first.
    Reconnects when the server closes."""
    while True:
        w = None
        try:
            r, w = await connect(port)
            while True:
                if cap is not None:
                    await cap.take()
                w.write(make_request())
                await w.drain()
                status, keep = await read_response(r)
                stats.add(f"status_{status}")
                if status >= 300 and pause_after_refusal:
                    await asyncio.sleep(pause_after_refusal)
                if not keep:
                    break
        except (OSError, asyncio.IncompleteReadError, ValueError, IndexError) as e:
            stats.add("error_" + type(e).__name__)
            await asyncio.sleep(0.01)
        finally:
            if w is not None:
                w.close()


async def attack_long_poll(cfg, stats):
    port, token = cfg["leader"], cfg["tokens"]["worker"]
    body = {"owner": "team-a/poller", "ttl_ms": 10000, "wait_ms": 30000}
    await asyncio.gather(*(
        keepalive_loop(stats, port, lambda: json_request(
            port, "POST", "/v1/queues/attack-empty/claim", token, body), 0.1)
        for _ in range(cfg.get("count", 256))))


async def attack_idem_409(cfg, stats):
    port, token = cfg["leader"], cfg["tokens"]["worker"]
    job = f"attack-big-{cfg['seed']}"
    pad = "a" * (64 * 1024 - len(json.dumps({"pad": ""})))
    assert len(json.dumps({"pad": pad})) == 64 * 1024
    st, body, _ = await asyncio.to_thread(
        http_call, port, "POST", "/v1/jobs", {"id": job, "payload": {"pad": pad}}, token)
    stats.add(f"setup_submit_{st}")
    st, body, _ = await asyncio.to_thread(
        http_call, port, "POST", f"/v1/jobs/{job}/claim",
        {"owner": "team-a/holder", "ttl_ms": 3_600_000}, token)
    stats.add(f"setup_claim_{st}")
    req = {"owner": "team-a/squatter", "ttl_ms": 10000}
    cap = RateCap(cfg.get("idem_rate", 0))
    await asyncio.gather(*(
        keepalive_loop(stats, port, lambda: json_request(
            port, "POST", f"/v1/jobs/{job}/claim", token, req,
            extra=f"Idempotency-Key: {uuid.uuid4().hex}\r\n"), 0, cap)
        for _ in range(cfg.get("loops", 16))))


async def attack_refusal_log(cfg, stats):
    body = b"\x00" * 16

    def req(port):
        return forged_peer_head(cfg, port, len(body)) + body

    await asyncio.gather(*(
        keepalive_loop(stats, port, lambda port=port: req(port), 0)
        for port in cfg["followers"] for _ in range(cfg.get("conns", 4))))


ATTACK_FNS = {
    "forged-stall": attack_forged_stall,
    "forged-big": attack_forged_big,
    "idle-conns": attack_idle_conns,
    "stalled-get": attack_stalled_get,
    "long-poll": attack_long_poll,
    "idem-409": attack_idem_409,
    "refusal-log": attack_refusal_log,
}

ATTACK_WHAT = {
    "forged-stall": "64 sockets/follower: forged POST /raft/append, CL 1,000,000, 1 byte, held",
    "forged-big": "16 parallel forged 64 MiB /raft/append bodies to one follower, looped",
    "idle-conns": "1,024 idle TCP connections to each node, reopened when closed",
    "stalled-get": "256 reader GET /v1/jobs, CL 1,000,000, stalled body, to the leader",
    "long-poll": "256 worker claim-next wait_ms 30000 on an empty queue, to the leader",
    "refusal-log": "4 keep-alive conns/follower: small forged /raft/append, back to back",
    "idem-409": "16 worker loops: keyed claim of a held 64 KiB job -> 409, to the leader",
}


def split_cores():
    """`--attacker-cpu split`, in the bench's own process before any node starts: the
    nodes, the client loops and the samplers inherit every core but the attacker's (as
    if the attacker sent from another machine, whose CPU and kernel TCP work are its own).
    The baseline runs on the same cores, so each ratio compares like with like."""
    cores = os.sched_getaffinity(0)
    if len(cores) < 2:
        raise SystemExit("--attacker-cpu split needs at least two cores")
    os.sched_setaffinity(0, cores - {max(cores)})
    return max(cores)


def run_attacker(name, cfg_path):
    raise_fd_limit()
    with open(cfg_path) as f:
        cfg = json.load(f)
    if cfg.get("attacker_cpu") == "idle":
        # The attacker runs only when the nodes and the client leave a core free: as if
        # it sent from another machine (its bytes still cost the nodes what they cost).
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    elif cfg.get("attacker_cpu") == "split":
        os.sched_setaffinity(0, {cfg["attacker_core"]})
    global ATTACKER_SOURCE
    ATTACKER_SOURCE = cfg.get("attacker_source", ATTACKER_SOURCE)
    stats = Stats(cfg["stats_file"])
    signal.signal(signal.SIGTERM, lambda *_: (stats.flush(), os._exit(0)))

    async def main():
        async def flusher():
            while True:
                stats.flush()
                await asyncio.sleep(0.5)
        await asyncio.gather(flusher(), ATTACK_FNS[name](cfg, stats))

    asyncio.run(main())


# ---- the bench ----------------------------------------------------------------------

class Bench:
    def __init__(self, args):
        self.args = args
        self.root = None
        self.cluster = None
        self.samplers = None
        self.client = None
        self.attacker = None
        self.incomplete = []  # why attacks were skipped (a cluster that did not settle)

    def log(self, msg):
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    def close(self):
        """Stops the attacker, the client, the samplers and the cluster; removes its dir."""
        self.stop_attacker()
        for part in (self.client, self.samplers):
            if part is not None:
                part.stop.set()
        if self.cluster is not None:
            self.cluster.stop()  # the client's calls then fail at once
            self.cluster = None
        for part in (self.client, self.samplers):
            if part is not None:
                for t in part.threads:
                    t.join(timeout=5)
        self.client = self.samplers = None
        if self.root is not None:
            if self.args.keep:
                self.log(f"kept {self.root}")
            else:
                shutil.rmtree(self.root, ignore_errors=True)
            self.root = None

    def stop_attacker(self):
        if self.attacker is not None and self.attacker.poll() is None:
            try:
                os.killpg(self.attacker.pid, signal.SIGTERM)
                self.attacker.wait(timeout=5)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(self.attacker.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.attacker.wait(timeout=5)
        self.attacker = None

    def settle(self):
        """Ready on all nodes, and RSS no longer falling (bounded)."""
        t0 = now()
        leader, _ = self.cluster.wait_ready(60)
        deadline = now() + 20
        hist = []
        while now() < deadline:
            hist.append(self.cluster.rss_all())
            if len(hist) > 4:
                old, new = hist[-5], hist[-1]  # two seconds apart
                if all((old[i] or 0) - (new[i] or 0) < 2048 for i in self.cluster.ids):
                    break
            time.sleep(0.5)
        self.log(f"settled in {now() - t0:.1f}s (leader {leader})")
        return leader

    def spawn_attacker(self, name, leader, cluster_id):
        ports = self.cluster.ports
        followers = [i for i in self.cluster.ids if i != leader]
        cfg = {
            "seed": self.args.seed,
            "cluster_id": cluster_id,
            "from_id": leader,
            "followers": [ports[i] for i in followers],
            "big_target": ports[self.follower_via],
            "leader": ports[leader],
            "all": [ports[i] for i in self.cluster.ids],
            "tokens": {k: v for k, v in self.cluster.tokens.items() if k != "normal"},
            "stats_file": os.path.join(self.root, f"attacker-{name}.json"),
            "pace_ms": self.args.pace_ms,
            "idem_rate": self.args.idem_rate,
            "attacker_cpu": self.args.attacker_cpu,
            "attacker_core": getattr(self.args, "attacker_core", None),
            "attacker_source": self.args.attacker_source,
        }
        path = os.path.join(self.root, f"attacker-{name}-config.json")
        with open(path, "w") as f:
            json.dump(cfg, f)
        self.attacker = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--attacker", name,
             "--attacker-config", path],
            stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent, start_new_session=True)
        return cfg

    def measure(self, name, seconds, leader, cfg=None):
        c = self.cluster
        logs0, cpu0, mcpu0, t0 = c.log_sizes(), c.cpu_all(), machine_cpu_s(), now()
        aborted = None
        while now() - t0 < seconds:
            time.sleep(0.2)
            rss = c.rss_all()
            big = [i for i, v in rss.items() if v and v / 1024 > self.args.rss_abort_mib]
            if big:
                aborted = f"node(s) {big} past --rss-abort-mib {self.args.rss_abort_mib}"
                break
            if self.attacker is not None and self.attacker.poll() is not None:
                aborted = f"attacker exited with {self.attacker.returncode}"
                break
        t1 = now()
        logs1, cpu1, mcpu1 = c.log_sizes(), c.cpu_all(), machine_cpu_s()
        res = self.client.window(t0, t1)
        res.update(name=name, seconds=round(t1 - t0, 2), leader=leader,
                   what=ATTACK_WHAT.get(name, "no attack"), aborted=aborted,
                   alive={str(i): a for i, a in c.alive().items()})
        rss = self.samplers.rss_window(t0, t1)
        res["rss_mib"] = {str(i): {
            "start": round(s / 1024, 1) if s else None,
            "peak": round(p / 1024, 1) if p else None,
            "end": round(e / 1024, 1) if e else None,
            "growth": round((p - s) / 1024, 1) if s and p else None} for i, (s, p, e) in rss.items()}
        res["log_bytes_per_s"] = {str(i): round((logs1[i] - logs0[i]) / (t1 - t0))
                                  for i in c.ids}
        res["log_lines_per_s"] = self._log_lines(logs0, logs1, t1 - t0)
        # Where the CPU went: each node's own (cores busy), and the machine's by kind —
        # softirq is the kernel's TCP work, charged to nobody's scheduling class.
        res["node_cpu_cores"] = {str(i): round((cpu1[i] - cpu0[i]) / (t1 - t0), 3)
                                 for i in c.ids if cpu0[i] is not None and cpu1[i] is not None}
        res["machine_cpu_cores"] = {k: round((mcpu1[k] - mcpu0[k]) / (t1 - t0), 3)
                                    for k in mcpu0}
        res["admin_probe"] = self.samplers.probe_failures(t0, t1)
        if cfg is not None:
            self.stop_attacker()
            try:
                with open(cfg["stats_file"]) as f:
                    res["attacker"] = json.load(f)
            except (OSError, ValueError):
                res["attacker"] = {}
        res["refused_metrics"] = c.refused_metrics()
        return res

    def _log_lines(self, logs0, logs1, dt):
        out = {}
        for i in self.cluster.ids:
            with open(self.cluster.logs[i], "rb") as f:
                f.seek(logs0[i])
                chunk = f.read(max(0, logs1[i] - logs0[i]))
            out[str(i)] = round(chunk.count(b"\n") / dt)
        return out

    def run(self):
        a = self.args
        raise_fd_limit()
        names = ATTACKS if a.attack == "all" else a.attack.split(",")
        results = {"meta": self.meta(), "baseline": None, "attacks": []}
        groups = [[n] for n in names] if a.fresh_cluster else [names]
        for group in groups:
            try:
                base, rows = self.run_cluster(group)
            finally:
                self.close()
            results["baseline"] = results["baseline"] or base
            results["attacks"].extend(rows)
        results["meta"]["load_after"] = uptime_text()
        results["meta"]["incomplete"] = self.incomplete
        return results

    def start_cluster(self):
        """A fresh cluster, samplers and a running normal client; returns (leader, cluster id)."""
        a = self.args
        self.root = tempfile.mkdtemp(prefix="leasehold-attack-")
        self.cluster = Cluster(os.path.abspath(a.bin), self.root, a.serve_arg)
        self.log(f"cluster in {self.root}; seed {a.seed}; {uptime_text()}")
        self.cluster.start()
        leader, cluster_id = self.cluster.wait_ready(60)
        self.follower_via = [i for i in self.cluster.ids if i != leader][0]
        half = max(1, a.loops // 2)
        via = [leader] * half + [self.follower_via] * (a.loops - half)
        self.log(f"leader {leader}, cluster {cluster_id}; client loops via {via}")
        self.samplers = Samplers(self.cluster)
        self.samplers.start()
        self.client = NormalClient(self.cluster, via, a.think_ms / 1000.0, a.seed)
        self.log(f"prefilling {a.backlog} jobs per loop")
        self.client.prefill(a.backlog, self.cluster.ports[leader])
        self.client.start()
        time.sleep(min(2.0, a.seconds / 2))  # warm-up, not measured
        return leader, cluster_id, via

    def run_cluster(self, names):
        """Baseline, then each attack in `names` (settling in between), on one cluster."""
        a = self.args
        leader, cluster_id, via = self.start_cluster()
        self.log(f"baseline for {a.seconds}s")
        base = self.measure("baseline", a.seconds, leader)
        base["client_via"] = via
        rows = []
        for name in names:
            try:
                leader = self.settle()
            except RuntimeError as e:
                self.incomplete.append(f"before {name}: {e}")
                self.log(f"stopping this cluster's attacks: {e}")
                break
            _, cluster_id = self.cluster.leader() or (leader, cluster_id)
            metrics0 = self.cluster.refused_metrics()
            cfg = self.spawn_attacker(name, leader, cluster_id)
            self.log(f"attack {name} for {a.seconds}s (leader {leader})")
            r = self.measure(name, a.seconds, leader, cfg)
            r["refused_metrics_delta"] = metric_delta(metrics0, r["refused_metrics"])
            r["client_via"] = via
            judge(r, base)
            rows.append(r)
            self.log(f"  {name}: {r['verdict']} {'; '.join(r['why']) or ''}")
        try:
            self.settle()
        except RuntimeError as e:
            self.log(f"after the last attack: {e}")
        return base, rows

    def meta(self):
        a = self.args
        commit = None
        try:
            commit = subprocess.run(
                ["git", "-C", os.path.dirname(os.path.abspath(__file__)), "rev-parse", "HEAD"],
                capture_output=True, text=True, timeout=5).stdout.strip() or None
        except (OSError, subprocess.SubprocessError):
            pass
        return {"bin": os.path.abspath(a.bin), "bench_commit": commit, "seed": a.seed,
                "backlog": a.backlog,
                "seconds": a.seconds, "loops": a.loops, "think_ms": a.think_ms,
                "fresh_cluster": a.fresh_cluster, "serve_args": a.serve_arg,
                "pace_ms": a.pace_ms, "idem_rate": a.idem_rate,
                "attacker_cpu": a.attacker_cpu, "attacker_source": a.attacker_source,
                "load_before": uptime_text(), "cpus": os.cpu_count(),
                "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def metric_delta(before, after):
    """{node: {series: after - before}} for the refusal counters that moved."""
    def parse(lines):
        out = {}
        for ln in lines:
            name, _, value = ln.rpartition(" ")
            try:
                out[name] = float(value)
            except ValueError:
                pass
        return out
    res = {}
    for i, lines in after.items():
        b, a = parse(before.get(i, [])), parse(lines)
        d = {k: v - b.get(k, 0.0) for k, v in a.items() if v - b.get(k, 0.0)}
        res[str(i)] = d
    return res


def judge(r, base):
    """Adds verdict and why: the issue's targets against the baseline."""
    why = []
    claim = r["ops"].get("claim", {})
    b99 = base["ops"].get("claim", {}).get("p99_ms")
    p99 = claim.get("p99_ms")
    r["baseline_claim_p99_ms"] = b99
    r["p99_ratio"] = round(p99 / b99, 2) if p99 is not None and b99 else None
    # Informational (not a target): every call type's p99 against its baseline.
    r["op_p99_ratio"] = {
        op: round(d["p99_ms"] / base["ops"][op]["p99_ms"], 2)
        for op, d in r["ops"].items()
        if d.get("p99_ms") is not None and base["ops"].get(op, {}).get("p99_ms")}
    if p99 is None:
        why.append("no claim finished")
    elif r["p99_ratio"] is not None and r["p99_ratio"] > P99_RATIO_MAX:
        why.append(f"claim p99 {r['p99_ratio']}x baseline")
    growth = [g["growth"] for g in r["rss_mib"].values() if g["growth"] is not None]
    if growth and max(growth) > RSS_GROWTH_MAX_MIB:
        why.append(f"RSS +{max(growth):.0f} MiB")
    bad = {k: v for k, v in r["errors"].items() if k.split(":")[-1] not in RETRY_STATUSES}
    if bad:
        why.append("errors " + ",".join(f"{k}={v}" for k, v in sorted(bad.items())))
    if not all(r["alive"].values()):
        why.append("a node died")
    if r.get("aborted"):
        why.append("aborted: " + r["aborted"])
    r["verdict"] = "FAIL" if why else "PASS"
    r["why"] = why


def fmt(v, nd=1):
    return "-" if v is None else f"{v:.{nd}f}"


def table(results) -> str:
    rows = [results["baseline"]] + results["attacks"]
    head = (f"{'attack':<13} {'claims':>6} {'p50ms':>7} {'p99ms':>8} {'maxms':>8} "
            f"{'base99':>7} {'p99x':>6} {'errors (op:status=n)':<34} {'RSS growth MiB n1/n2/n3':<24} "
            f"{'log KiB/s max':>13} {'probe fail':>10} {'worst op p99x':>13}  verdict")
    out = [head, "-" * len(head)]
    for r in rows:
        c = r["ops"].get("claim", {})
        errs = ",".join(f"{k}={v}" for k, v in sorted(r["errors"].items())) or "none"
        if len(errs) > 34:
            errs = errs[:31] + "..."
        growth = "/".join(fmt(g["growth"], 0) for _, g in sorted(r["rss_mib"].items()))
        logk = max(r["log_bytes_per_s"].values()) / 1024
        probes = sum(sum(d["failed"].values()) for d in r["admin_probe"].values())
        total = sum(d["probes"] for d in r["admin_probe"].values())
        worst = max(r.get("op_p99_ratio", {}).items(), key=lambda kv: kv[1], default=None)
        worst = f"{worst[0]} {worst[1]:.2f}" if worst else "-"
        out.append(f"{r['name']:<13} {c.get('calls', 0):>6} {fmt(c.get('p50_ms')):>7} "
                   f"{fmt(c.get('p99_ms')):>8} {fmt(c.get('max_ms')):>8} "
                   f"{fmt(r.get('baseline_claim_p99_ms')):>7} {fmt(r.get('p99_ratio'), 2):>6} {errs:<34} {growth:<24} "
                   f"{logk:>13.1f} {f'{probes}/{total}':>10} {worst:>13}  "
                   f"{r.get('verdict', 'base')}")
    return "\n".join(out)


def details(results) -> str:
    """Per attack, what the table cuts short: errors, why, the attacker's own counts."""
    out = []
    for r in [results["baseline"]] + results["attacks"]:
        out.append(f"{r['name']}: {r.get('verdict', 'base')} {'; '.join(r.get('why', []))}")
        out.append(f"  errors {r['errors'] or 'none'}; unfinished at the end {r['unfinished']}")
        out.append("  log lines/s " + str(r["log_lines_per_s"]) + "; admin probe failures "
                   + str({i: d["failed"] for i, d in r["admin_probe"].items() if d["failed"]}))
        if "node_cpu_cores" in r:
            out.append(f"  CPU cores busy: nodes {r['node_cpu_cores']}; machine "
                       f"{r.get('machine_cpu_cores')}")
        if "attacker" in r:
            out.append(f"  attacker {r['attacker']}")
        if r.get("refused_metrics_delta"):
            out.append(f"  /metrics refusals during it {r['refused_metrics_delta']}")
    return "\n".join(out)


# ---- self-check (no network) --------------------------------------------------------

def selftest():
    assert percentile([], 99) is None
    xs = list(range(1, 101))
    random.Random(1).shuffle(xs)
    assert percentile(xs, 50) == 50 and percentile(xs, 99) == 99 and percentile(xs, 100) == 100
    assert percentile([7], 99) == 7 and percentile([1, 2], 50) == 1 and percentile([1, 2], 51) == 2
    assert percentile([3.0, 1.0, 2.0], 0) == 1.0

    def row(name, p99, growth, errors):
        return {"name": name, "ops": {"claim": {"calls": 10, "ok": 10, "p50_ms": 1.0,
                                                "p99_ms": p99, "max_ms": p99}},
                "errors": errors, "alive": {"1": True, "2": True, "3": True}, "aborted": None,
                "rss_mib": {str(i): {"start": 10.0, "peak": 10.0 + growth, "end": 10.0,
                                     "growth": growth} for i in (1, 2, 3)},
                "log_bytes_per_s": {"1": 0, "2": 2048, "3": 0}, "unfinished": {},
                "log_lines_per_s": {"1": 0, "2": 20, "3": 0},
                "admin_probe": {"1": {"probes": 4, "failed": {"503": 1}}}}

    base = row("baseline", 10.0, 0.0, {})
    ok = row("idle-conns", 20.0, 100.0, {"claim:503": 3, "submit:504": 1})
    slow = row("forged-stall", 20.5, 0.0, {})
    fat = row("idem-409", 5.0, 100.5, {})
    broken = row("long-poll", 5.0, 0.0, {"claim:ConnectionResetError": 1})
    for r in (ok, slow, fat, broken):
        judge(r, base)
    assert ok["verdict"] == "PASS" and ok["p99_ratio"] == 2.0, ok
    assert slow["verdict"] == "FAIL" and "2.05x" in slow["why"][0], slow
    assert fat["verdict"] == "FAIL" and "RSS" in fat["why"][0], fat
    assert broken["verdict"] == "FAIL" and "ConnectionResetError" in broken["why"][0], broken
    results = {"meta": {"seed": 1}, "baseline": base, "attacks": [ok, slow, fat, broken]}
    back = json.loads(json.dumps(results))
    assert back == results
    text = table(back)
    assert details(results).count("FAIL") == 3
    assert text.count("\n") == 6 and "FAIL" in text and "PASS" in text, text
    # The client's window accounting, without a network: calls, errors, an unfinished claim.
    nc = NormalClient.__new__(NormalClient)
    nc.lock = threading.Lock()
    nc.calls = [("claim", 0, 1.0, 1.010, "ok"), ("claim", 0, 2.0, 2.030, "ok"),
                ("claim", 1, 0.5, 1.5, "ok"), ("submit", 0, 3.0, 3.001, "409")]
    nc.errors = [(2.01, "claim", 0, "503"), (3.0, "submit", 0, "409")]
    nc.inflight = {1: ("claim", 4.0)}
    w = nc.window(1.0, 5.0)
    assert w["ops"]["claim"]["calls"] == 2 and round(w["ops"]["claim"]["max_ms"]) == 1000, w
    assert w["errors"] == {"claim:503": 1, "submit:409": 1, "submit:final:409": 1}, w
    assert w["unfinished"] == {"claim": 1}, w
    # Attack wire bytes: the forged peer head keeps the shape.
    head = forged_peer_head({"from_id": 1, "cluster_id": "ab" * 16}, 7001, 1_000_000).decode()
    assert "\r\nContent-Length: 1000000\r\n\r\n" in head and " from=1 cluster=" + "ab" * 16 in head
    mac = head.split("mac=")[1].split("\r\n")[0]
    assert len(mac) == 64 and int(mac, 16) >= 0
    d = metric_delta({"1": ['x{reason="a"} 5', "y 2"]}, {"1": ['x{reason="a"} 7', "y 2", "z 1"]})
    assert d == {"1": {'x{reason="a"}': 2.0, "z": 1.0}}, d
    print("selftest: ok")


# ---- main ---------------------------------------------------------------------------

def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bin", help="the leasehold binary")
    p.add_argument("--attack", default="all", help=f"all, or a comma list of {ATTACKS}")
    p.add_argument("--seconds", type=float, default=10.0, help="baseline and each attack")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--out", help="write the JSON results here")
    p.add_argument("--loops", type=int, default=4, help="normal client loops (half via the leader)")
    p.add_argument("--backlog", type=int, default=400,
                   help="jobs prefilled per loop's queue (claims go on while submits fail)")
    p.add_argument("--think-ms", type=float, default=20.0, help="pause between a loop's jobs")
    p.add_argument("--rss-abort-mib", type=float, default=RSS_ABORT_MIB_DEFAULT)
    p.add_argument("--serve-arg", action="append", default=[],
                   help="extra `serve` argument for every node (repeat; use --serve-arg=--x=y)")
    p.add_argument("--fresh-cluster", action="store_true",
                   help="a new cluster (and baseline) per attack: no attack inherits another's "
                        "memory or state")
    p.add_argument("--keep", action="store_true", help="keep the temp dir (data, logs)")
    p.add_argument("--pace-ms", type=float, default=100.0,
                   help="a held-socket attack's slot opens at most one socket per this many "
                        "ms (forged-stall, idle-conns, stalled-get); 0: reopen at once")
    p.add_argument("--idem-rate", type=float, default=1150.0,
                   help="idem-409's keyed requests/s, all loops together (the issue's 4,000 "
                        "in 3.5 s); 0: as fast as they go")
    p.add_argument("--flood", action="store_true",
                   help="the stress mode: --pace-ms 0 --idem-rate 0")
    p.add_argument("--attacker-cpu", choices=["shared", "idle", "split"],
                   default="shared",
                   help="idle: the attacker runs under SCHED_IDLE, taking only CPU the "
                        "cluster and client leave; split: the attacker gets a core of its "
                        "own and the cluster and client the others, baseline included "
                        "(the closest this one machine comes to an attacker elsewhere)")
    p.add_argument("--attacker-source", default="127.0.0.2",
                   help="the address the attacker's sockets come from: by default a "
                        "loopback address of its own, as another host's; 127.0.0.1 shares "
                        "the normal client's (one NAT, one host), so the per-source caps "
                        "no longer tell them apart")
    p.add_argument("--selftest", action="store_true")
    p.add_argument("--attacker", help=argparse.SUPPRESS)
    p.add_argument("--attacker-config", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.attack != "all":
        for n in a.attack.split(","):
            if n not in ATTACK_FNS:
                p.error(f"unknown attack {n!r}; known: {', '.join(ATTACKS)}")
    if not a.selftest and not a.attacker and not a.bin:
        p.error("--bin is required")
    if a.seed is None:
        a.seed = random.SystemRandom().randrange(1 << 31)
    if a.flood:
        a.pace_ms, a.idem_rate = 0.0, 0.0
    return a


def main(argv=None):
    a = parse_args(sys.argv[1:] if argv is None else argv)
    if a.selftest:
        selftest()
        return 0
    if a.attacker:
        run_attacker(a.attacker, a.attacker_config)
        return 0
    random.seed(a.seed)
    if a.attacker_cpu == "split":
        a.attacker_core = split_cores()

    def on_term(*_):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_term)
    bench = Bench(a)
    try:
        results = bench.run()
    except KeyboardInterrupt:
        print("interrupted: nodes and attacker stopped", file=sys.stderr)
        return 130
    finally:
        bench.close()
    print(table(results))
    print(details(results))
    print(f"seed {a.seed}; load before: {results['meta']['load_before']}; "
          f"after: {results['meta']['load_after']}")
    for why in results["meta"]["incomplete"]:
        print(f"INCOMPLETE: {why}")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(results, f, indent=1)
    if results["meta"]["incomplete"]:
        return 1
    return 0 if all(r["verdict"] == "PASS" for r in results["attacks"]) else 1


if __name__ == "__main__":
    sys.exit(main())
