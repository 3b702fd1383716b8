"""One logical call: attempts across the endpoints, retries under one
``Idempotency-Key``, and the final answer or error (the Rust client's ``transport.rs``).

The decisions are made in ``_retry`` (judge, rotation, backoff); this module performs
them, once for blocking code (:class:`SyncTransport`) and once for asyncio
(:class:`AsyncTransport`), sharing everything but the sending and the sleeping
(:class:`Core`). It learns which endpoint is which node id from the ``X-Leasehold-Node``
header of every answer, so a ``X-Leasehold-Leader`` hint (an id) becomes an endpoint to
try first: only as a hint, and only among the endpoints it was given (an address learnt
from ``/v1/cluster`` may be unreachable from here, behind NAT or in a container).
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import secrets
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from . import _retry
from .errors import LeaseholdError, OutcomeUnknown, Timeout, Unavailable

log = logging.getLogger("leasehold.transport")

NODE_HEADER = "x-leasehold-node"
LEADER_HEADER = "x-leasehold-leader"
IDEMPOTENCY_HEADER = "Idempotency-Key"

#: TCP connect timeout per attempt (seconds): a refused or silent node is skipped for the
#: next one, and 500 ms is ample on a LAN.
CONNECT_TIMEOUT = 0.5
#: Whole-attempt timeout (seconds). A follower may take its leader wait (3 s) plus one
#: forward (the leader's 3 s wait + 5 s write timeout) before answering 503/504: 12 s
#: stays above that. A timed-out write is retried under the same key: safe, only wasteful.
REQUEST_TIMEOUT = 12.0


def new_idempotency_key() -> str:
    """128 random bits as 32 hex digits: unique per logical call, within api.md's
    1-128 visible ASCII bytes."""
    return secrets.token_hex(16)


@dataclass
class Call:
    """One logical call. Its key (for writes) and body stay the same across every
    attempt. ``attempt_timeout`` overrides the client's per-attempt timeout,
    ``extra_wait`` is added to it (a server-side wait), and no new attempt starts later
    than ``budget`` seconds after the first send."""

    method: str
    path: str
    body: Any = None
    key: str | None = None
    attempt_timeout: float | None = None
    extra_wait: float = 0.0
    budget: float | None = None
    #: Checked before every attempt after the first: when it returns True the call
    #: ends (as exhausted) without another attempt. A keep-alive's renew round uses it
    #: so that no renew attempt starts once the lease is cancelled.
    abandon: Callable[[], bool] | None = None

    @property
    def is_write(self) -> bool:
        """Anything but a GET changes state (and carries a key)."""
        return self.method != "GET"

    def encoded_body(self) -> bytes | None:
        """The body as compact JSON, encoded once per call."""
        if self.body is None:
            return None
        return json.dumps(self.body, separators=(",", ":"), ensure_ascii=False).encode()


def write(method: str, path: str, body: Any = None, key: str | None = None) -> Call:
    """A write: a JSON body and an ``Idempotency-Key`` for this logical call (fresh
    unless the caller chose one)."""
    return Call(method, path, body, key or new_idempotency_key())


@dataclass
class Answer:
    """A final answer, and when the call's first attempt was sent (``time.monotonic()``,
    the lease deadline's basis)."""

    status: int
    body: bytes
    first_sent: float

    def json(self) -> Any:
        """The body decoded; ``None`` for an empty one."""
        return json.loads(self.body) if self.body else None


@dataclass
class Exchange:
    """What one attempt came to."""

    kind: _retry.Attempt
    status: int = 0
    body: bytes = b""
    retry_after: float | None = None
    leader: int | None = None
    why: str = ""


@dataclass
class Progress:
    """What a call has been through so far."""

    first_sent: float = field(default_factory=time.monotonic)
    attempts: int = 0
    #: Some attempt may have taken effect (504, timeout, cut-off answer).
    maybe_applied: bool = False
    #: The last such attempt was a 504 ``timeout`` answer.
    last_unknown_was_504: bool = False
    pass_retry_after: float | None = None
    last: str = ""

    def exhausted(self, is_write: bool) -> LeaseholdError:
        """The error of a call whose retries ran out: a write that may have been applied
        is "outcome unknown" (``Timeout`` after a 504), never "unavailable"."""
        msg = f"after {self.attempts} attempt(s): {self.last}"
        if is_write and self.maybe_applied:
            cls = Timeout if self.last_unknown_was_504 else OutcomeUnknown
            return cls(f"outcome unknown {msg}", status=504 if cls is Timeout else 0)
        return Unavailable(f"unavailable {msg}", status=503)


def _header_int(headers: httpx.Headers, name: str) -> int | None:
    try:
        return int(headers.get(name, "").strip())
    except ValueError:
        return None


class Core:
    """What both transports share: the endpoints, headers, the preferred endpoint and
    the node-id map, and the bookkeeping of one attempt."""

    def __init__(
        self,
        endpoints: list[str],
        *,
        token: str | None,
        request_timeout: float,
        connect_timeout: float,
        max_attempts: int,
    ) -> None:
        self.endpoints = endpoints
        self.request_timeout = request_timeout
        self.connect_timeout = connect_timeout
        self.max_attempts = max_attempts
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.preferred = 0
        self._node_ids: dict[int, int] = {}
        self._lock = threading.Lock()

    def timeout(self, call: Call) -> httpx.Timeout:
        """The httpx timeout of one attempt of ``call``."""
        total = (call.attempt_timeout or self.request_timeout) + call.extra_wait
        return httpx.Timeout(total, connect=min(self.connect_timeout, total))

    def request_headers(self, call: Call) -> dict[str, str]:
        """Headers of every attempt of ``call`` (the same key on each)."""
        h = {}
        if call.key is not None:
            h[IDEMPOTENCY_HEADER] = call.key
        if call.body is not None:
            h["Content-Type"] = "application/json"
        return h

    def exchange_of(self, idx: int, resp: httpx.Response, body: bytes) -> Exchange:
        """An answered attempt; learns the answering node's id."""
        node = _header_int(resp.headers, NODE_HEADER)
        if node is not None:
            with self._lock:
                self._node_ids[node] = idx
        retry_after = _header_int(resp.headers, "retry-after")
        return Exchange(
            _retry.Attempt.ANSWERED,
            status=resp.status_code,
            body=body,
            retry_after=float(retry_after) if retry_after is not None else None,
            leader=_header_int(resp.headers, LEADER_HEADER),
        )

    def failed_exchange(self, idx: int, e: httpx.HTTPError) -> Exchange:
        """A connect error means nothing was sent; anything else may have been."""
        not_sent = isinstance(e, (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout))
        kind = _retry.Attempt.NOT_SENT if not_sent else _retry.Attempt.LOST
        return Exchange(kind, why=f"{self.endpoints[idx]}: {type(e).__name__}: {e}")

    def settle(self, idx: int, call: Call, ex: Exchange, prog: Progress) -> Answer | int | None:
        """The final :class:`Answer`, or (progress updated) the endpoint the answer named
        as leader (``None`` when none) to retry with."""
        verdict = _retry.judge(ex.kind, ex.status)
        hint = None
        if ex.leader is not None:
            with self._lock:
                hint = self._node_ids.get(ex.leader)
        if verdict.final:
            self.preferred = hint if hint is not None else idx
            return Answer(ex.status, ex.body, prog.first_sent)
        if verdict.maybe_applied:
            prog.maybe_applied = True
            prog.last_unknown_was_504 = ex.status == 504
        if ex.retry_after is not None:
            prog.pass_retry_after = max(prog.pass_retry_after or 0.0, ex.retry_after)
        prog.last = ex.why or f"{self.endpoints[idx]}: HTTP {ex.status} {ex.body[:200]!r}"
        log.debug(
            "%s %s attempt %d (key %s) not final: %s", call.method, call.path,
            prog.attempts, call.key, prog.last,
        )
        return hint

    def next_step(
        self, call: Call, prog: Progress, rotation: _retry.Rotation, hint: int | None
    ) -> float:
        """After a failed attempt: the wait before the next one; raises the exhausted
        error when no attempt or budget is left."""
        if prog.attempts >= self.max_attempts:
            raise prog.exhausted(call.is_write)
        _, new_pass = rotation.advance(hint)
        wait = 0.0
        if new_pass:
            wait = _retry.backoff(rotation.passes, prog.pass_retry_after, random.random())
            prog.pass_retry_after = None
        if call.budget is not None and time.monotonic() + wait > prog.first_sent + call.budget:
            raise prog.exhausted(call.is_write)
        if call.abandon is not None and call.abandon():
            prog.last += " (abandoned)"
            raise prog.exhausted(call.is_write)
        return wait


def _verify(ca_file: str | None) -> ssl.SSLContext | bool:
    return ssl.create_default_context(cafile=ca_file) if ca_file else True


class SyncTransport:
    """Runs calls with a blocking ``httpx.Client`` (shared by threads)."""

    def __init__(self, core: Core, ca_file: str | None) -> None:
        self.core = core
        # trust_env=False: nodes are reached directly; an HTTP_PROXY meant for the
        # internet must not sit between a worker and its lease service.
        self.http = httpx.Client(
            headers=core.headers, verify=_verify(ca_file), trust_env=False
        )

    def execute(self, call: Call) -> Answer:
        """Runs ``call`` until a final answer, rotating endpoints and backing off."""
        rotation = _retry.Rotation(len(self.core.endpoints), self.core.preferred)
        prog = Progress()
        while True:
            prog.attempts += 1
            ex = self._send_once(rotation.current, call)
            out = self.core.settle(rotation.current, call, ex, prog)
            if isinstance(out, Answer):
                return out
            wait = self.core.next_step(call, prog, rotation, out)
            if wait > 0:
                time.sleep(wait)
                if call.abandon is not None and call.abandon():
                    raise prog.exhausted(call.is_write)

    def _send_once(self, idx: int, call: Call) -> Exchange:
        url = self.core.endpoints[idx] + call.path
        try:
            resp = self.http.request(
                call.method, url, content=call.encoded_body(),
                headers=self.core.request_headers(call), timeout=self.core.timeout(call),
            )
        except httpx.HTTPError as e:
            return self.core.failed_exchange(idx, e)
        return self.core.exchange_of(idx, resp, resp.content)

    def close(self) -> None:
        """Closes the connection pool."""
        self.http.close()


class AsyncTransport:
    """Runs calls with an ``httpx.AsyncClient``."""

    def __init__(self, core: Core, ca_file: str | None) -> None:
        self.core = core
        self.http = httpx.AsyncClient(
            headers=core.headers, verify=_verify(ca_file), trust_env=False
        )

    async def execute(self, call: Call) -> Answer:
        """Runs ``call`` until a final answer, rotating endpoints and backing off."""
        rotation = _retry.Rotation(len(self.core.endpoints), self.core.preferred)
        prog = Progress()
        while True:
            prog.attempts += 1
            ex = await self._send_once(rotation.current, call)
            out = self.core.settle(rotation.current, call, ex, prog)
            if isinstance(out, Answer):
                return out
            wait = self.core.next_step(call, prog, rotation, out)
            if wait > 0:
                await asyncio.sleep(wait)

    async def _send_once(self, idx: int, call: Call) -> Exchange:
        url = self.core.endpoints[idx] + call.path
        try:
            resp = await self.http.request(
                call.method, url, content=call.encoded_body(),
                headers=self.core.request_headers(call), timeout=self.core.timeout(call),
            )
        except httpx.HTTPError as e:
            return self.core.failed_exchange(idx, e)
        return self.core.exchange_of(idx, resp, resp.content)

    async def aclose(self) -> None:
        """Closes the connection pool."""
        await self.http.aclose()
