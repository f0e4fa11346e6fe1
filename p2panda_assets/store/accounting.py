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


ACCOUNTING = """
WITH logs AS (
    SELECT author, log_id FROM p2panda.logs WHERE schema_id = %(s)s
), stored AS (
    SELECT e.hash, e.ingest_seq <= coalesce(
        (SELECT verified_through FROM p2panda.pipeline_state), 0) AS verified
    FROM p2panda.entries e
    JOIN logs l ON l.author = e.author AND l.log_id = e.log_id
)
SELECT
    (SELECT count(*) FROM stored WHERE verified),
    (SELECT count(*) FROM stored WHERE NOT verified),
    (SELECT count(*) FROM stored s WHERE s.verified
        AND NOT EXISTS (SELECT 1 FROM p2panda.accounts a WHERE a.hash = s.hash)),
    (SELECT count(*) FROM stored s JOIN p2panda.accounts a ON a.hash = s.hash
        WHERE a.schema_id IS DISTINCT FROM %(s)s),
    (SELECT count(*) FROM p2panda.accounts a WHERE a.schema_id = %(s)s
        AND NOT EXISTS (SELECT 1 FROM stored s WHERE s.hash = a.hash))
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
