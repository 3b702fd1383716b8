"""``https://`` endpoints with ``ca_file``: the client trusts only that CA (a node
certificate from another CA is refused before any request is sent)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import leasehold
from cluster import Cluster


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _ca(d: Path, name: str) -> None:
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-days", "30", "-subj", f"/CN={name}", "-keyout", f"{name}.key",
             "-out", f"{name}.pem", cwd=d)


@pytest.fixture
def certs(tmp_path: Path) -> Path:
    """A CA, a node certificate for 127.0.0.1 signed by it, and an unrelated CA."""
    _ca(tmp_path, "ca")
    _ca(tmp_path, "other-ca")
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-subj", "/CN=node", "-keyout", "node.key", "-out", "node.csr", cwd=tmp_path)
    (tmp_path / "ext").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n")
    _openssl("x509", "-req", "-in", "node.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-CAcreateserial", "-days", "30", "-extfile", "ext", "-out", "node.pem",
             cwd=tmp_path)
    for key in tmp_path.glob("*.key"):
        key.chmod(0o600)
    return tmp_path


def test_https_endpoints_with_the_cluster_ca(certs: Path) -> None:
    ca = str(certs / "ca.pem")
    tls = ["--tls-cert", str(certs / "node.pem"), "--tls-key", str(certs / "node.key"),
           "--tls-ca", ca]
    c = Cluster(extra_args=tls, ca_file=ca)
    try:
        c.wait_leader()
        https = [f"https://{e}" for e in c.endpoints]
        with leasehold.Client(https, ca_file=ca) as client:
            lease = client.claim("tls-1", owner="w", ttl_ms=600)
            with lease:
                assert not lease.cancelled.wait(1.0), lease.cancel_error
            assert lease.job is not None and lease.job.state == "completed"
        with leasehold.Client(https, ca_file=str(certs / "other-ca.pem"),
                              max_attempts=3) as stranger:
            with pytest.raises(leasehold.Unavailable) as e:
                stranger.submit("tls-2")
            assert "certificate" in e.value.message.lower() or "ssl" in e.value.message.lower()
        with leasehold.Client(https, ca_file=ca) as client:
            with pytest.raises(leasehold.NotFound):
                client.get_job("tls-2")
    finally:
        c.close()
