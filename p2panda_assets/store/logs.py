"""The one writer of `p2panda.logs`: each log with verified entries as the index step
classified it (schema or instance log, the schema it is assigned to, its tip).

Only the index step decides a log, so only its transactions (`pipeline_state.commit_index`
through `replace_logs`, and `commit_appended`) call these; with every statement that
writes the table here, nothing else can reassign a log. Each function does one write in
the caller's transaction. The reads stay with the index step's others
(`pipeline_state.stored_logs`, `count_logs`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import psycopg
from psycopg import sql

# The columns of a logs row, in the order the index step gives them.
LOG_COLUMNS = (
    "author",
    "log_id",
    "is_schema",
    "ref_schema_id",
    "ref_version",
    "ref_hash",
    "schema_id",
    "assignment",
    "why_reason",
    "why_message",
    "tip_seq",
    "tip_ended",
    "clean",
)
_COPY_LOGS = sql.SQL("COPY p2panda.logs ({}) FROM STDIN").format(
    sql.SQL(", ").join(map(sql.Identifier, LOG_COLUMNS))
)


def forget_all_logs(conn: psycopg.Connection) -> None:
    """Empty the table: a whole index step writes every log again."""
    conn.execute("DELETE FROM p2panda.logs")


def forget_logs(conn: psycopg.Connection, keys: Sequence[tuple[object, object]]) -> int:
    """Drop the rows of the logs `keys` names (author, log id): an appending index step
    writes those it touched again. How many there were."""
    cursor = conn.execute(
        "DELETE FROM p2panda.logs l USING unnest(%s::bytea[], %s::numeric[]) AS k(a, i)"
        " WHERE l.author = k.a AND l.log_id = k.i",
        ([k[0] for k in keys], [k[1] for k in keys]),
    )
    return max(cursor.rowcount, 0)


def copy_logs(conn: psycopg.Connection, logs: Iterable[Sequence[object]]) -> int:
    """Add `logs` (rows of `LOG_COLUMNS`) by COPY; how many."""
    written = 0
    with conn.cursor().copy(_COPY_LOGS) as copy:
        for row in logs:
            copy.write_row(row)
            written += 1
    return written
