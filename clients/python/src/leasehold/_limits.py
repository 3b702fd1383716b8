"""api.md's names and limits, checked before anything is sent (the same bounds as the
node's ``statemachine/src/limits.rs``, which the Rust client shares). A violation raises
:class:`~leasehold.InvalidArgument` (or :class:`~leasehold.PayloadTooLarge` for a value
over its size), with the message the node would answer, and changes nothing."""

from __future__ import annotations

import json
import re
from typing import Any

from .errors import InvalidArgument, PayloadTooLarge

JOB_ID_LEN_MAX = 256
OWNER_LEN_MAX = 128
QUEUE_LEN_MAX = 64
TTL_MS_MIN = 100
TTL_MS_MAX = 3_600_000
PAYLOAD_BYTES_MAX = 64 * 1024
PROGRESS_BYTES_MAX = 16 * 1024
JSON_DEPTH_MAX = 64
LIST_LIMIT_MAX = 1000
WAIT_MS_MAX = 30_000
IDEMPOTENCY_KEY_LEN_MAX = 128
PRIORITY_MIN = -1000
PRIORITY_MAX = 1000
DELAY_MS_MAX = 86_400_000
ERROR_BYTES_MAX = 4 * 1024
REASON_BYTES_MAX = 1024
REDRIVE_LIMIT_MAX = 1000
EVENTS_LIMIT_MAX = 1000

_NAME = re.compile(r"[A-Za-z0-9._\-:/@]+\Z")
_QUEUE = re.compile(r"[a-z0-9_\-]+\Z")
_VISIBLE_ASCII = re.compile(r"[\x21-\x7e]+\Z")


def _name(what: str, value: object, len_max: int, pattern: re.Pattern[str]) -> str:
    if not isinstance(value, str):
        raise InvalidArgument(f"{what} must be a string (got {type(value).__name__})")
    size = len(value.encode())
    if size == 0 or size > len_max:
        raise InvalidArgument(f"{what} must be 1-{len_max} bytes (got {size})")
    if not pattern.match(value):
        bad = next(c for c in value if not pattern.match(c))
        raise InvalidArgument(f"{what} contains a forbidden character {bad!r}")
    return value


def job_id(value: object) -> str:
    """A job id: 1-256 bytes of ``A-Z a-z 0-9 . _ - : / @``; ``.`` and ``..`` are valid
    names but dot-segments no URL can address (as the Rust client, refused here)."""
    v = _name("job id", value, JOB_ID_LEN_MAX, _NAME)
    if v in (".", ".."):
        raise InvalidArgument(f"job id {v!r} cannot be addressed in a URL path")
    return v


def owner(value: object) -> str:
    """An owner: 1-128 bytes of the job id's characters."""
    return _name("owner", value, OWNER_LEN_MAX, _NAME)


def queue(value: object) -> str:
    """A queue: 1-64 bytes of ``a-z 0-9 _ -``."""
    return _name("queue", value, QUEUE_LEN_MAX, _QUEUE)


def idempotency_key(value: object) -> str:
    """An ``Idempotency-Key``: 1-128 bytes of visible ASCII."""
    return _name("Idempotency-Key", value, IDEMPOTENCY_KEY_LEN_MAX, _VISIBLE_ASCII)


def integer(what: str, value: object, lo: int, hi: int) -> int:
    """An integer (not a bool) within ``[lo, hi]``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{what} must be an integer (got {type(value).__name__})")
    if not lo <= value <= hi:
        raise InvalidArgument(f"{what} must be {lo}-{hi} (got {value})")
    return value


def ttl_ms(value: object) -> int:
    """A lease TTL: 100 - 3,600,000 ms (node flags may narrow it further)."""
    return integer("ttl_ms", value, TTL_MS_MIN, TTL_MS_MAX)


def text(what: str, value: object, max_bytes: int) -> str:
    """A free-text field (``error``, ``reason``) of at most ``max_bytes`` bytes."""
    if not isinstance(value, str):
        raise InvalidArgument(f"{what} must be a string (got {type(value).__name__})")
    size = len(value.encode())
    if size > max_bytes:
        raise InvalidArgument(f"{what} must be at most {max_bytes} bytes (got {size})")
    return value


def json_depth(encoded: str) -> int:
    """How deep ``[``/``{`` nest in ``encoded``, brackets inside strings not counted
    (the node's own scan)."""
    depth = deepest = 0
    in_string = escaped = False
    for c in encoded:
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif c in "]}":
            depth = max(0, depth - 1)
    return deepest


def json_value(what: str, value: Any, max_bytes: int) -> Any:
    """A JSON value within ``max_bytes`` encoded and 64 levels deep; returned as is."""
    try:
        encoded = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise InvalidArgument(f"{what} is not encodable as JSON: {e}") from None
    size = len(encoded.encode())
    if size > max_bytes:
        raise PayloadTooLarge(f"{what} is {size} bytes encoded, at most {max_bytes} allowed")
    depth = json_depth(encoded)
    if depth > JSON_DEPTH_MAX:
        raise InvalidArgument(
            f"{what} is nested {depth} levels deep, at most {JSON_DEPTH_MAX} allowed"
        )
    return value
