"""Who requests the run for a new entry: the entries sensor or the live listener, never
both (issue 56: one run per change).

Both decide from their own cursor over `ingest_seq`, and a decision and the run it
creates are apart in time: the listener creates its run after it read the store, the
daemon creates the sensor's after the tick returned. So the two take `ENTRIES_LOCK`
around their decisions, and the sensor writes down what it read (its cursor) before it
lets go; the listener, under the lock, leaves those entries to the sensor and creates its
runs before it lets go, so the sensor's next read sees them.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg

ENTRIES_LOCK = 0x70326E65  # the pipeline lock's neighbour (store/pipeline_lock.py)


@contextmanager
def entries_lock(conn: psycopg.Connection) -> Iterator[None]:
    """Hold the entries lock (a session advisory lock) for the block: a decision about
    new entries and what it leaves behind happen as one."""
    conn.execute("SELECT pg_advisory_lock(%s)", (ENTRIES_LOCK,))
    try:
        yield
    finally:
        conn.execute("SELECT pg_advisory_unlock(%s)", (ENTRIES_LOCK,))


def claim_entries(conn: psycopg.Connection, cursor: str) -> None:
    """The entries sensor read the store up to `cursor` (an `EntryCursor`'s text)."""
    conn.execute(
        "INSERT INTO p2panda.entries_claim (id, cursor) VALUES (1, %s)"
        " ON CONFLICT (id) DO UPDATE SET cursor = excluded.cursor",
        (cursor,),
    )


def claimed_entries(conn: psycopg.Connection) -> str | None:
    """The entries sensor's cursor as of its last tick; None before its first."""
    row = conn.execute("SELECT cursor FROM p2panda.entries_claim WHERE id = 1").fetchone()
    return None if row is None else row[0]
