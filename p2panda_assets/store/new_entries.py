"""The entries verification has not read yet: how far every ingest has committed
(`committed_bound`), how many lie past the progress mark, and their bytes by one binary
COPY (`read_new_entries`). Reads only: `p2panda.entries` is written by `ingest.py`."""

from __future__ import annotations

from collections.abc import Iterator
from typing import cast

import psycopg
from psycopg import sql

from p2panda_assets.store.ingest import INGEST_LOCK


def committed_bound(conn: psycopg.Connection) -> int:
    """The highest ingest_seq below which every entry is committed: taken while no
    ingest transaction is open (they hold INGEST_LOCK shared until they commit)."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (INGEST_LOCK,))
        row = conn.execute("SELECT coalesce(max(ingest_seq), 0) FROM p2panda.entries").fetchone()
    return int(row[0]) if row else 0


NEW_ENTRY_COLUMNS = (
    ("ingest_seq", "int8"),
    ("hash", "bytea"),
    ("entry", "bytea"),
    ("payload", "bytea"),
    ("verdict", "text"),
    ("verdict_message", "text"),
)


_NEW_ENTRIES = sql.SQL(
    "COPY (SELECT {} FROM p2panda.entries WHERE ingest_seq > {} AND ingest_seq <= {}"
    " ORDER BY ingest_seq) TO STDOUT (FORMAT BINARY)"
)


def read_new_entries(
    conn: psycopg.Connection, low: int, high: int, *, chunk: int = 5_000, chunk_bytes: int = 1 << 25
) -> Iterator[list[tuple[object, ...]]]:
    """The entries with `low < ingest_seq <= high` (columns `NEW_ENTRY_COLUMNS`), in
    lists of up to `chunk` rows or about `chunk_bytes` of entries and payloads (a
    payload may be 1 MiB). One binary COPY: bytea arrives as bytes, not as the hex text
    a query result (or Spark's JDBC reader) carries, which doubles its size and must be
    decoded again."""
    statement = _NEW_ENTRIES.format(
        sql.SQL(", ").join(sql.Identifier(c) for c, _ in NEW_ENTRY_COLUMNS),
        sql.Literal(int(low)),
        sql.Literal(int(high)),
    )
    rows: list[tuple[object, ...]] = []
    size = 0
    with conn.cursor().copy(statement) as copy:
        copy.set_types([t for _, t in NEW_ENTRY_COLUMNS])
        for row in copy.rows():
            rows.append(row)
            size += len(cast(bytes, row[2])) + len(cast(bytes | None, row[3]) or b"")
            if len(rows) == chunk or size >= chunk_bytes:
                yield rows
                rows, size = [], 0
    if rows:
        yield rows


def count_new_entries(conn: psycopg.Connection, low: int, high: int) -> int:
    row = conn.execute(
        "SELECT count(*) FROM p2panda.entries WHERE ingest_seq > %s AND ingest_seq <= %s",
        (low, high),
    ).fetchone()
    return int(row[0]) if row else 0


def entries_at_most(conn: psycopg.Connection) -> int:
    """An upper bound of the entries stored, read from an index's end: the last
    `ingest_seq` handed out (a failed ingest leaves gaps)."""
    row = conn.execute("SELECT coalesce(max(ingest_seq), 0) FROM p2panda.entries").fetchone()
    return int(row[0]) if row else 0
