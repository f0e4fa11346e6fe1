"""Which entries were rejected, and where each came from: the rejected accounts
(`p2panda.accounts`) joined with their entries and the file each was ingested from
(`p2panda.ingest_sources`). `panda status --rejected` and the accounting check read them
here; the counts per reason alone are `registry.status_rows` and `accounting.py`'s."""

from __future__ import annotations

from dataclasses import dataclass

import psycopg
from psycopg.rows import class_row

# The whole store, or the rejections of one schema (an entry rejected before its log
# could be given a schema has none: a bad signature on a log of nothing else).
_WHERE_ALL = "a.state = 'rejected'"
_WHERE_SCHEMA = "a.state = 'rejected' AND a.schema_id = %(schema_id)s"
_SELECT = """
SELECT a.hash, e.author, e.log_id, e.seq_num, a.schema_id, a.reason, a.message,
       s.path, e.source_line AS line
FROM p2panda.accounts a
LEFT JOIN p2panda.entries e ON e.hash = a.hash
LEFT JOIN p2panda.ingest_sources s ON s.id = e.source_id
WHERE {where}
ORDER BY a.schema_id NULLS FIRST, e.author, e.log_id, e.seq_num, a.hash
LIMIT %(limit)s
"""
_COUNT = "SELECT count(*) FROM p2panda.accounts a WHERE {where}"


@dataclass(frozen=True, slots=True)
class Rejection:
    """One rejected entry, with what a person needs to find it: its log and seq, why,
    and the file and line it was ingested from (None if it came another way)."""

    hash: bytes
    author: bytes | None  # None if the entry bytes did not decode
    log_id: int | None
    seq_num: int | None
    schema_id: str | None  # None if rejected before its log had a schema
    reason: str | None
    message: str | None
    path: str | None
    line: int | None

    @property
    def place(self) -> str | None:
        """`file:line`, or None for an entry that did not come from a file."""
        return None if self.path is None else f"{self.path}:{self.line}"


def rejections(
    conn: psycopg.Connection, schema_id: str | None = None, limit: int | None = None
) -> list[Rejection]:
    """The rejected entries of one schema (all of the store's if None), by schema, log
    and seq; at most `limit` of them."""
    where = _WHERE_ALL if schema_id is None else _WHERE_SCHEMA
    with conn.cursor(row_factory=class_row(Rejection)) as cursor:
        rows = cursor.execute(
            _SELECT.format(where=where), {"schema_id": schema_id, "limit": limit}
        ).fetchall()
    return [_with_int_numbers(row) for row in rows]


def rejected_count(conn: psycopg.Connection, schema_id: str | None = None) -> int:
    """How many entries are rejected, of one schema or of the whole store."""
    where = _WHERE_ALL if schema_id is None else _WHERE_SCHEMA
    row = conn.execute(_COUNT.format(where=where), {"schema_id": schema_id}).fetchone()
    return int(row[0]) if row else 0


def _with_int_numbers(row: Rejection) -> Rejection:
    """numeric(20, 0) arrives as Decimal; log ids and seqs are ints everywhere else."""
    return Rejection(
        row.hash,
        row.author,
        None if row.log_id is None else int(row.log_id),
        None if row.seq_num is None else int(row.seq_num),
        row.schema_id,
        row.reason,
        row.message,
        row.path,
        row.line,
    )
