"""Fixtures: a real three-node cluster per test (``cluster``), clients on it, and a
throw-away PostgreSQL server (``postgres_dsn``) run from Debian's ``postgresql`` package
with ``initdb``/``pg_ctl`` in a temp dir on a free port, as an unprivileged user (initdb
refuses root). Never the system cluster Debian may have created.

``LEASEHOLD_REQUIRE_POSTGRES=1`` (set by run-tests.sh, i.e. in CI) turns a missing
PostgreSQL server into a failure instead of a skip.
"""

from __future__ import annotations

import glob
import os
import pwd
import random
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import leasehold
from cluster import Cluster, free_port

#: Every randomized test draws from this seed; printed on failure (see pytest_runtest_makereport).
SEED = int(os.environ.get("LEASEHOLD_TEST_SEED", random.randrange(2**32)))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: object) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.failed:
        report.sections.append(("seed", f"LEASEHOLD_TEST_SEED={SEED} pytest '{item.nodeid}'"))


@pytest.fixture
def rng() -> random.Random:
    """A seeded random source (the seed is printed with any failure)."""
    return random.Random(SEED)


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    """A fresh three-node cluster with a leader; killed and removed afterwards."""
    c = Cluster()
    try:
        c.wait_leader()
        c.wait_version()
        yield c
    except BaseException:
        print(c.logs())
        raise
    finally:
        c.close()


@pytest.fixture
def client(cluster: Cluster) -> Iterator[leasehold.Client]:
    """A blocking client on every node of ``cluster``."""
    with leasehold.Client(cluster.endpoints) as c:
        yield c


# --- PostgreSQL --------------------------------------------------------------------------


def _pg_bindir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0)
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).resolve().parent if initdb else None


def _pg_user() -> tuple[int, int] | None:
    """(uid, gid) to run the server as: ourselves unless root; then ``postgres`` (the
    package creates it) or ``nobody``."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            pw = pwd.getpwnam(name)
            return pw.pw_uid, pw.pw_gid
        except KeyError:
            continue
    raise RuntimeError("running as root and no unprivileged user (postgres, nobody) exists")


@pytest.fixture
def postgres_dsn() -> Iterator[str]:
    """A PostgreSQL server of our own on a free loopback port; stopped and removed after."""
    bindir = _pg_bindir()
    if bindir is None:
        msg = "PostgreSQL server binaries not found (apt-get install -y postgresql)"
        if os.environ.get("LEASEHOLD_REQUIRE_POSTGRES") == "1":
            pytest.fail(msg)
        pytest.skip(msg)
    ids = _pg_user()
    root = Path(tempfile.mkdtemp(prefix="leasehold-pg-"))
    if ids is not None:
        os.chown(root, *ids)
    data, port = root / "data", free_port()
    as_user = {} if ids is None else {"user": ids[0], "group": ids[1], "extra_groups": []}

    def run(*args: str) -> None:
        subprocess.run(args, check=True, capture_output=True, timeout=120, cwd=root, **as_user)  # type: ignore[call-overload]

    try:
        run(str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust",
            "-E", "UTF8", "--no-sync")
        opts = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off"
        run(str(bindir / "pg_ctl"), "-D", str(data), "-o", opts, "-l", str(root / "pg.log"),
            "-w", "-t", "60", "start")
        yield f"host=127.0.0.1 port={port} user=postgres dbname=postgres connect_timeout=5"
    finally:
        if (data / "postmaster.pid").exists():
            subprocess.run([str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w",
                            "-t", "60", "stop"], capture_output=True, timeout=90, cwd=root,
                           **as_user)  # type: ignore[call-overload]
        shutil.rmtree(root, ignore_errors=True)
