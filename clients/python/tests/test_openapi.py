"""The OpenAPI document against a real node (issue 34 item 4): what ``GET
/v1/openapi.json`` serves is the checked-in ``docs/openapi.json``, a valid OpenAPI 3.1
document (``openapi-spec-validator``), and every operation it lists, sent a valid
request, answers with a status the operation lists, a content type it lists for that
status, and a body its schema accepts (JSON Schema 2020-12, ``jsonschema``).

Raw HTTP (httpx), not the client: this checks the server against its description."""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from jsonschema import Draft202012Validator
from openapi_spec_validator import validate

from cluster import Cluster

DOC_PATH = Path(__file__).resolve().parents[3] / "docs" / "openapi.json"


class Checker:
    """Sends requests to one node and checks each answer against the document."""

    def __init__(self, cluster: Cluster, doc: dict[str, Any]) -> None:
        self.doc = doc
        self.base = f"http://{cluster.endpoint(1)}"
        self.http = httpx.Client(timeout=30.0, trust_env=False)
        self.covered: set[str] = set()

    def operation(self, method: str, path: str) -> tuple[str, dict[str, Any]]:
        """The document's operation for a concrete path: its templated path matched
        segment by segment (a `{name}` matches one segment)."""
        bare = path.split("?", 1)[0]
        for template, item in self.doc["paths"].items():
            pattern = "^" + re.sub(r"\{[^}]+\}", "[^/]+", template) + "$"
            if re.match(pattern, bare) and method.lower() in item:
                return template, item[method.lower()]
        raise AssertionError(f"the document has no operation for {method} {bare}")

    def send(self, method: str, path: str, body: Any = None,
             headers: dict[str, str] | None = None) -> httpx.Response:
        """Sends one request, checks its answer, and returns it."""
        template, op = self.operation(method, path)
        r = self.http.request(method, self.base + path, json=body, headers=headers)
        self.covered.add(op["operationId"])
        where = f"{method} {path} ({op['operationId']}) answered {r.status_code}: {r.text[:300]}"
        answer = op["responses"].get(str(r.status_code))
        assert answer is not None, f"{where}; the document lists {sorted(op['responses'])}"
        content = answer.get("content")
        if content is None:
            assert not r.content, f"{where}: a body where the document says none"
            return r
        media = r.headers.get("content-type", "").split(";")[0].strip()
        declared = {k.split(";")[0].strip(): v for k, v in content.items()}
        key = next((k for k in declared if fnmatch.fnmatch(media, k)), None)
        assert key is not None, f"{where}: content type {media!r}, document lists {list(declared)}"
        if key == "application/json":
            schema = {**declared[key]["schema"], "components": self.doc["components"]}
            errors = sorted(Draft202012Validator(schema).iter_errors(r.json()), key=str)
            assert not errors, f"{where}: the body breaks the schema: {errors[0]}"
        return r


@pytest.fixture
def checker(cluster: Cluster) -> Iterator[Checker]:
    doc = httpx.get(f"http://{cluster.endpoint(1)}/v1/openapi.json", timeout=10.0).json()
    c = Checker(cluster, doc)
    try:
        yield c
    finally:
        c.http.close()


def test_served_document_is_the_checked_in_one_and_valid(checker: Checker) -> None:
    assert checker.doc == json.loads(DOC_PATH.read_text()), (
        "GET /v1/openapi.json differs from docs/openapi.json")
    validate(checker.doc)  # raises on an invalid OpenAPI 3.1 document
    assert checker.doc["openapi"].startswith("3.1")


def _lease_cycle(c: Checker) -> None:
    """Every job and lease operation, in an order where each request is valid."""
    c.send("POST", "/v1/jobs", {"id": "oa-1", "payload": {"n": 1}, "priority": 3},
           {"Idempotency-Key": "oa-submit-1"})
    c.send("GET", "/v1/jobs/oa-1")
    c.send("GET", "/v1/jobs?queue=default&state=pending&limit=10")
    g = c.send("POST", "/v1/jobs/oa-1/claim", {"owner": "w1", "ttl_ms": 30000}).json()["generation"]
    c.send("POST", "/v1/jobs/oa-1/renew", {"owner": "w1", "generation": g, "progress": {"step": 1}})
    c.send("POST", "/v1/jobs/oa-1/release", {"owner": "w1", "generation": g, "error": "later"})
    g = c.send("POST", "/v1/queues/default/claim", {"owner": "w1", "ttl_ms": 30000}).json()["generation"]
    c.send("POST", "/v1/jobs/oa-1/fail", {"owner": "w1", "generation": g, "error": "boom"})
    c.send("POST", "/v1/queues/default/redrive", {"limit": 10})
    leases = c.send("POST", "/v1/queues/default/claim",
                    {"owner": "w1", "ttl_ms": 30000, "max_jobs": 4}).json()["leases"]
    items = [{"job_id": x["job_id"], "generation": x["generation"]} for x in leases]
    assert items, "the redriven job is claimable"
    c.send("POST", "/v1/leases/renew", {"owner": "w1", "ttl_ms": 30000, "leases": items})
    c.send("POST", "/v1/leases/complete", {"owner": "w1", "leases": items})
    assert c.send("POST", "/v1/queues/default/claim", {"owner": "w1", "ttl_ms": 30000}).status_code == 204
    c.send("POST", "/v1/jobs", {"id": "oa-2"})
    g = c.send("POST", "/v1/jobs/oa-2/claim", {"owner": "w2", "ttl_ms": 30000}).json()["generation"]
    c.send("POST", "/v1/jobs/oa-2/complete", {"owner": "w2", "generation": g, "result": [1, 2]})
    c.send("POST", "/v1/jobs", {"id": "oa-3", "queue": "other"})
    c.send("POST", "/v1/jobs/oa-3/cancel", {"reason": "not needed"})
    c.send("POST", "/v1/jobs/oa-3/retry", {})
    c.send("GET", "/v1/jobs/oa-1/history")
    c.send("DELETE", "/v1/jobs/oa-2")
    c.send("GET", "/v1/events?after=0&limit=5")
    c.send("GET", "/v1/events?after=0&queue=other&job_id=oa-3&limit=5&wait_ms=0")


def _cluster_and_probes(c: Checker, cluster: Cluster) -> None:
    for path in ["/v1/cluster", "/v1/cluster/digest", "/v1/cluster/members",
                 "/v1/cluster/rejections?after=0&limit=10", "/healthz", "/readyz", "/metrics",
                 "/ui", "/ui/", "/ui/app.js", "/ui/style.css", "/v1/openapi.json",
                 "/v1/cluster/snapshot?read_index=true", "/v1/cluster/snapshot"]:
        c.send("GET", path)
    # An error answer is checked as well: the status and its body are described too.
    assert c.send("GET", "/v1/jobs/no-such-job").status_code == 404
    assert c.send("POST", "/v1/jobs/oa-x/claim", {"owner": "w", "ttl_ms": 1}).status_code == 400
    # Membership last: re-adding a member as it is, then removing one.
    c.send("POST", "/v1/cluster/nodes", {"id": 3, "addr": cluster.endpoint(3)})
    assert c.send("DELETE", "/v1/cluster/nodes/3").status_code == 200


def test_every_operation_answers_as_the_document_says(checker: Checker, cluster: Cluster) -> None:
    _lease_cycle(checker)
    _cluster_and_probes(checker, cluster)
    listed = {op["operationId"] for item in checker.doc["paths"].values() for op in item.values()}
    assert listed - checker.covered == set(), "operations no request here exercised"
