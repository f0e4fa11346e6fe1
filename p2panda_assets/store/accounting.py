"""The accounts of a schema as the accounting check reads them: stored entries of its
logs against their accounts (`p2panda.accounts`)."""

from __future__ import annotations

from dataclasses import dataclass

import psycopg


@dataclass(frozen=True, slots=True)
class AccountTotals:
    """Counts over the stored entries of a schema's logs (its own, and the instance logs
    the index assigned to it)."""

    stored: int  # verified (ingested up to the last index step)
    unverified: int  # ingested after it: no verdict yet
    missing: int  # verified, and no account
    elsewhere: int  # accounted to another schema
    foreign: int  # accounts of the schema for entries not on its logs


# Each stored entry of the schema's logs paired with the schema's own accounts (both
# found by index, a schema's worth each); only an entry left without one is looked up
# among every account, to tell a missing account from one held by another schema. A join
# of the entries with every account instead read the whole accounts table on each check
# (0.58-0.71 s a schema on the bench's store of 1M, against 0.19-0.24 s so).
ACCOUNTING = """
WITH logs AS (
    SELECT author, log_id FROM p2panda.logs WHERE schema_id = %(s)s
), stored AS (
    SELECT e.hash, e.ingest_seq <= coalesce(
        (SELECT verified_through FROM p2panda.pipeline_state), 0) AS verified
    FROM p2panda.entries e
    JOIN logs l ON l.author = e.author AND l.log_id = e.log_id
), own AS (
    SELECT hash FROM p2panda.accounts WHERE schema_id = %(s)s
), paired AS (
    SELECT s.hash AS stored, s.verified, o.hash AS own
    FROM stored s FULL JOIN own o ON o.hash = s.hash
), unpaired AS (
    SELECT p.verified, EXISTS (SELECT 1 FROM p2panda.accounts a WHERE a.hash = p.stored)
        AS accounted
    FROM paired p WHERE p.own IS NULL AND p.stored IS NOT NULL
)
SELECT
    (SELECT count(*) FILTER (WHERE stored IS NOT NULL AND verified) FROM paired),
    (SELECT count(*) FILTER (WHERE stored IS NOT NULL AND NOT verified) FROM paired),
    (SELECT count(*) FILTER (WHERE verified AND NOT accounted) FROM unpaired),
    (SELECT count(*) FILTER (WHERE accounted) FROM unpaired),
    (SELECT count(*) FILTER (WHERE stored IS NULL) FROM paired)
"""
BY_STATE = """
SELECT state, reason, count(*) FROM p2panda.accounts WHERE schema_id = %s
GROUP BY state, reason
"""


def account_totals(conn: psycopg.Connection, schema_id: str) -> AccountTotals:
    row = conn.execute(ACCOUNTING, {"s": schema_id}).fetchone()
    assert row is not None  # scalar subqueries: always one row
    return AccountTotals(*(int(n) for n in row))


def accounts_by_state(
    conn: psycopg.Connection, schema_id: str
) -> list[tuple[str, str | None, int]]:
    """(state, reason, count) of the schema's accounts."""
    rows = conn.execute(BY_STATE, (schema_id,)).fetchall()
    return [(str(state), reason, int(count)) for state, reason, count in rows]
