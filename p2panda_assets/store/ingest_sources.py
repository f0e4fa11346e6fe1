"""The one writer of `p2panda.ingest_sources`: the files `panda ingest` read, one row
each, so that an entry stored from a file can name its `file:line` later (`panda status
--rejected`) for 12 bytes an entry (`p2panda.entries.source_id` and `source_line`)
instead of its path."""

from __future__ import annotations

import os

import psycopg


def add_source(conn: psycopg.Connection, path: str) -> int:
    """Record a file about to be ingested; its id. The path is made absolute: the
    listing that names it may run from another directory."""
    row = conn.execute(
        "INSERT INTO p2panda.ingest_sources (path) VALUES (%s) RETURNING id",
        (os.path.abspath(path),),
    ).fetchone()
    assert row is not None  # INSERT ... RETURNING of one row
    return int(row[0])
