"""The one writer of `p2panda.accounts`: where every stored entry ended (rule A-ONCE).

Each stage of the pipeline replaces only the accounts of its own `origin` (verify, chain,
schema, pending, instance), ingest drops those of an entry it replaced, and unregistering
makes a schema's instance accounts pending. With every statement that writes the table in
this module, what one stage may do to another's rows is read in one place. Each function
does one write in the caller's transaction; the transactions that combine them stay with
their callers (`pipeline_state.commit_verification`, `commit_index`, `commit_appended`,
`tables.swap_schemas`, `apply_increment`, `unregister.unregister`, `ingest.store_round`).
Staged rows come in by their staging table's identifier. The accounting check's reads of
the table are `accounting.py`'s.
"""

from __future__ import annotations

from collections.abc import Sequence

import psycopg
from psycopg import sql

from p2panda_assets.errors import Reason

UPSERT_ACCOUNTS = """
ON CONFLICT (hash) DO UPDATE SET schema_id = EXCLUDED.schema_id, state = EXCLUDED.state,
  reason = EXCLUDED.reason, message = EXCLUDED.message, origin = EXCLUDED.origin
"""

# Entries rejected before their log was classified get the schema of their log.
_ATTRIBUTE_EARLY_REJECTIONS = """
UPDATE p2panda.accounts a SET schema_id = g.schema_id
FROM p2panda.entries e JOIN p2panda.logs g ON e.author = g.author AND e.log_id = g.log_id
WHERE a.hash = e.hash AND a.origin IN ('verify', 'chain') AND a.schema_id IS NULL
  AND g.schema_id IS NOT NULL
"""


def forget_replaced_entries(conn: psycopg.Connection, hashes: Sequence[bytes]) -> None:
    """Drop the accounts of entries an ingest replaced (a copy with the right payload):
    each waits for verification again, like a new entry."""
    conn.execute("DELETE FROM p2panda.accounts WHERE hash = ANY(%s)", (list(hashes),))


def forget_verification_rejections(conn: psycopg.Connection) -> None:
    """Drop what verification rejected (origin `verify`): everything is verified again."""
    conn.execute("DELETE FROM p2panda.accounts WHERE origin = 'verify'")


def add_verification_rejections(conn: psycopg.Connection, staged: sql.Identifier) -> None:
    """The rejections one verification staged, under origin `verify`."""
    conn.execute(
        sql.SQL(
            "INSERT INTO p2panda.accounts (hash, schema_id, state, reason, message, origin)"
            " SELECT hash, schema_id, state, reason, message, 'verify' FROM {}" + UPSERT_ACCOUNTS
        ).format(staged)
    )


def forget_index_accounts(conn: psycopg.Connection) -> None:
    """Drop what the index step decided (origins `chain`, `schema`, `pending`): a whole
    index step decides it all again."""
    conn.execute("DELETE FROM p2panda.accounts WHERE origin IN ('chain', 'schema', 'pending')")


def forget_schema_log_accounts(conn: psycopg.Connection) -> None:
    """Drop the schema logs' accounts (origin `schema`): an appending index step decides
    them all again."""
    conn.execute("DELETE FROM p2panda.accounts WHERE origin = 'schema'")


def add_index_accounts(conn: psycopg.Connection, staged: sql.Identifier) -> None:
    """The accounts an index step staged, each under the origin it staged."""
    conn.execute(
        sql.SQL(
            "INSERT INTO p2panda.accounts (hash, schema_id, state, reason, message, origin)"
            " SELECT hash, schema_id, state, reason, message, origin FROM {}" + UPSERT_ACCOUNTS
        ).format(staged)
    )


def unattribute_verification_rejections(conn: psycopg.Connection) -> None:
    """Verification's rejections lose their schema, which `attribute_early_rejections`
    gives them again from the logs as the index step classified them now."""
    conn.execute("UPDATE p2panda.accounts SET schema_id = NULL WHERE origin = 'verify'")


def attribute_early_rejections(conn: psycopg.Connection) -> None:
    """Entries rejected before their log was classified (origins `verify`, `chain`)
    get the schema of their log."""
    conn.execute(_ATTRIBUTE_EARLY_REJECTIONS)


def forget_instance_accounts(conn: psycopg.Connection, schema_id: str) -> None:
    """Drop the accounts the schema's builds wrote (origin `instance`): a whole build's
    swap writes them all again."""
    conn.execute(
        "DELETE FROM p2panda.accounts WHERE origin = 'instance' AND schema_id = %s",
        (schema_id,),
    )


def add_instance_accounts(conn: psycopg.Connection, staged: sql.Identifier, schema_id: str) -> None:
    """The staged accounts of the schema's instance logs, by a plain INSERT: it fails on
    an entry that already has an account."""
    _instance_accounts(conn, staged, schema_id, "")


def upsert_instance_accounts(
    conn: psycopg.Connection, staged: sql.Identifier, schema_id: str
) -> None:
    """The staged accounts of the schema's instance logs, each replacing the account of
    its entry if there is one."""
    _instance_accounts(conn, staged, schema_id, UPSERT_ACCOUNTS)


def _instance_accounts(
    conn: psycopg.Connection, staged: sql.Identifier, schema_id: str, on_conflict: str
) -> None:
    """Insert the staged accounts of the schema, in the order of the primary key:
    neighbouring rows land on the same index pages, and concurrent upserts take their
    row locks in one order (50,000 rows: 0.35-0.45 s against 0.40-0.54 s unsorted, six
    runs each)."""
    conn.execute(
        sql.SQL(
            "INSERT INTO p2panda.accounts (hash, schema_id, state, reason, message, origin)"
            " SELECT hash, schema_id, state, reason, message, 'instance' FROM {}"
            " WHERE schema_id = %s ORDER BY hash" + on_conflict
        ).format(staged),
        (schema_id,),
    )


def wait_for_registration(conn: psycopg.Connection, schema_id: str) -> int:
    """Account the entries the schema's builds accounted for as the index step does
    those of a schema that is not registered (`engine.corpus.Catalog.resolve`): pending,
    `awaiting-schema`, under origin `pending`, which the next index step replaces
    (rule A-ONCE: every stored entry stays accounted for). A rejection stays one: the
    same entries are rejected again when the schema is registered again. How many were
    made pending."""
    states = conn.execute(
        "UPDATE p2panda.accounts SET origin = 'pending',"
        " state = CASE WHEN state = 'rejected' THEN state ELSE 'pending' END,"
        " reason = CASE WHEN state = 'rejected' THEN reason ELSE %s END,"
        " message = CASE WHEN state = 'rejected' THEN message ELSE %s END"
        " WHERE origin = 'instance' AND schema_id = %s RETURNING state",
        (Reason.AWAITING_SCHEMA.value, f"schema {schema_id} is not registered", schema_id),
    ).fetchall()
    return sum(state == "pending" for (state,) in states)
