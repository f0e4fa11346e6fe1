"""A ledger of the Spark tasks that committed their rows: one staging table per job.

A task writes its rows in one transaction, so one that fails as it writes leaves none.
One can also fail after its commit (its executor lost before the driver has its result),
and Spark runs it again. In the same transaction as its rows, a task claims its row of
the ledger and records its result there; a later attempt finds the row and writes
nothing. Two attempts at once (speculation) meet at the row's key: the second waits for
the first's transaction, then finds its row, or claims it if the first rolled back.
"""

from __future__ import annotations

import secrets

import psycopg
from psycopg import sql

from p2panda_assets.store.staging import Stage

# How long the driver waits to drop a job's ledger. An attempt Spark no longer waits for
# (on an executor that is lost, or cut off) may still hold its claim; the run goes on,
# and the sweep of a later run's start drops the ledger (a `stage_*` table).
DROP_WAIT = "5s"


def create_ledger(conn: psycopg.Connection) -> Stage:
    """An empty ledger for one job's tasks (a `stage_*` table: a crashed run's is swept
    with its other stages)."""
    ledger = Stage("p2panda", f"stage_ledger_{secrets.token_hex(6)}")
    conn.execute(
        sql.SQL("CREATE UNLOGGED TABLE {} (task integer PRIMARY KEY, result bytea)").format(
            ledger.identifier
        )
    )
    return ledger


def claim_task(conn: psycopg.Connection, ledger: Stage, task: int) -> bytes | None:
    """In the task's open transaction: None if this attempt claims `task` (and is to
    write its rows); otherwise the result the attempt that committed recorded."""
    claimed = conn.execute(
        sql.SQL(
            "INSERT INTO {} (task) VALUES (%s) ON CONFLICT (task) DO NOTHING RETURNING task"
        ).format(ledger.identifier),
        (task,),
    ).fetchone()
    if claimed is not None:
        return None
    row = conn.execute(
        sql.SQL("SELECT result FROM {} WHERE task = %s").format(ledger.identifier), (task,)
    ).fetchone()
    assert row is not None and row[0] is not None, "a committed claim records its result"
    return bytes(row[0])


def record_task(conn: psycopg.Connection, ledger: Stage, task: int, result: bytes) -> None:
    """The result of `task`, which this attempt claimed, for any later attempt of it."""
    conn.execute(
        sql.SQL("UPDATE {} SET result = %s WHERE task = %s").format(ledger.identifier),
        (result, task),
    )


def drop_ledger(conn: psycopg.Connection, ledger: Stage) -> None:
    """Drop `ledger` after its job, unless a straggling attempt holds it past `DROP_WAIT`
    (the driver holds the pipeline lock meanwhile: it must not wait on a lost host)."""
    try:
        with conn.transaction():
            conn.execute(sql.SQL("SET LOCAL lock_timeout = {}").format(sql.Literal(DROP_WAIT)))
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(ledger.identifier))
    except psycopg.errors.LockNotAvailable:
        pass
