"""Fenced destinations: where a write made under a lease is checked against the highest
fencing token seen, so a worker that lost its lease cannot overwrite its successor's
work. ``leasehold.fence.postgres`` (extra ``postgres``) does it in PostgreSQL."""
