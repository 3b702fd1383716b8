"""A fence in PostgreSQL (psycopg 3; ``pip install 'leasehold[postgres]'``).

A lease is temporary ownership: a worker paused past its lease (GC, SIGSTOP, a VM
migration) wakes up believing it still holds the job while a successor with a higher
token already wrote. The store cannot stop that late write; the destination must. This
module keeps, per resource, the highest token that ever wrote, and performs a caller's
write **only if its token is not older than that**, in the same transaction as the
write, so the check and the write commit together or not at all.

Schema (:data:`SCHEMA`, installed by :func:`install`)::

    leasehold_fence(resource text PRIMARY KEY, token bigint NOT NULL,
                    updated_at timestamptz NOT NULL DEFAULT now())
        -- per resource, the highest fencing token seen
    leasehold_fence_idempotency(key text PRIMARY KEY, resource text NOT NULL,
                                token bigint NOT NULL,
                                applied_at timestamptz NOT NULL DEFAULT now())
        -- every idempotency key whose write was applied

How :func:`fenced_write` decides, in one transaction:

1. ``INSERT … ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token WHERE
   leasehold_fence.token <= EXCLUDED.token RETURNING token``: it takes the resource's
   row lock and raises the highest token to ours, unless the highest is newer — then no
   row comes back and PostgreSQL has rejected the write: :class:`StaleToken` is raised
   and the transaction rolled back. A writer queued on the row lock behind a newer
   token is judged against that token once it commits (READ COMMITTED re-checks the
   latest row version). Equal tokens pass: the same lease may write several times.
2. With an ``idempotency_key``: ``INSERT … ON CONFLICT DO NOTHING`` into the key table;
   a key already there means this write was applied before: it is dropped (returns
   ``False``), nothing else changes.
3. ``write(cursor)``: the caller's statements, on the same connection and transaction.

Tokens are api.md generations: per job they only grow, so the resource is usually the
job id or what the job writes to. Use one resource per thing that must not go back.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import psycopg

__all__ = ["SCHEMA", "StaleToken", "install", "fenced_write", "install_async",
           "fenced_write_async", "highest_token"]

#: The fence's two tables (idempotent DDL).
SCHEMA = """
CREATE TABLE IF NOT EXISTS leasehold_fence (
    resource   text PRIMARY KEY,
    token      bigint NOT NULL CHECK (token >= 0),
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS leasehold_fence_idempotency (
    key        text PRIMARY KEY,
    resource   text NOT NULL,
    token      bigint NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
"""

_RAISE = """
INSERT INTO leasehold_fence (resource, token) VALUES (%s, %s)
ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token, updated_at = now()
    WHERE leasehold_fence.token <= EXCLUDED.token
RETURNING token
"""
_HIGHEST = "SELECT token FROM leasehold_fence WHERE resource = %s"
_KEY = """
INSERT INTO leasehold_fence_idempotency (key, resource, token) VALUES (%s, %s, %s)
ON CONFLICT (key) DO NOTHING RETURNING key
"""


class StaleToken(Exception):
    """The write's token is older than the highest one seen for the resource: nothing
    was written (the transaction was rolled back)."""

    def __init__(self, resource: str, token: int, highest: int | None) -> None:
        super().__init__(f"token {token} for {resource!r} is older than the highest seen "
                         f"({highest}): write rejected")
        self.resource = resource
        self.token = token
        self.highest = highest


def _check(resource: str, token: int) -> None:
    if not isinstance(resource, str) or not resource:
        raise ValueError("resource must be a non-empty string")
    if isinstance(token, bool) or not isinstance(token, int) or not 0 <= token < 2**63:
        raise ValueError(f"token must be an integer in [0, 2^63) (got {token!r})")


def install(conn: psycopg.Connection[Any]) -> None:
    """Creates the fence's tables if they do not exist, and commits."""
    with conn.transaction():
        conn.execute(SCHEMA)


def highest_token(conn: psycopg.Connection[Any], resource: str) -> int | None:
    """The highest token seen for ``resource`` (``None`` if none wrote yet)."""
    row = conn.execute(_HIGHEST, (resource,)).fetchone()
    return None if row is None else int(row[0])


def fenced_write(
    conn: psycopg.Connection[Any], resource: str, token: int,
    write: Callable[[psycopg.Cursor[Any]], object], *, idempotency_key: str | None = None,
) -> bool:
    """Runs ``write(cursor)`` in one transaction with the fence check (see the module's
    documentation): ``True`` when written, ``False`` when ``idempotency_key`` was
    applied before (the write is dropped). Raises :class:`StaleToken` (rolled back)
    when ``token`` is older than the highest seen for ``resource``; an exception of
    ``write`` rolls everything back and propagates. Nests as a savepoint inside a
    transaction the caller opened."""
    _check(resource, token)
    with conn.transaction(), conn.cursor() as cur:
        if cur.execute(_RAISE, (resource, token)).fetchone() is None:
            raise StaleToken(resource, token, highest_token(conn, resource))
        if idempotency_key is not None:
            if cur.execute(_KEY, (idempotency_key, resource, token)).fetchone() is None:
                return False
        write(cur)
    return True


async def install_async(conn: psycopg.AsyncConnection[Any]) -> None:
    """:func:`install` for an ``AsyncConnection``."""
    async with conn.transaction():
        await conn.execute(SCHEMA)


async def fenced_write_async(
    conn: psycopg.AsyncConnection[Any], resource: str, token: int,
    write: Callable[[psycopg.AsyncCursor[Any]], Awaitable[object]], *,
    idempotency_key: str | None = None,
) -> bool:
    """:func:`fenced_write` for an ``AsyncConnection`` (``write`` is awaited)."""
    _check(resource, token)
    async with conn.transaction(), conn.cursor() as cur:
        if await (await cur.execute(_RAISE, (resource, token))).fetchone() is None:
            highest = await (await conn.execute(_HIGHEST, (resource,))).fetchone()
            raise StaleToken(resource, token, None if highest is None else int(highest[0]))
        if idempotency_key is not None:
            if await (await cur.execute(_KEY, (idempotency_key, resource, token))).fetchone() is None:
                return False
        await write(cur)
    return True
