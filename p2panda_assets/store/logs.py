"""The one writer of `p2panda.logs`: each log with verified entries as the index step
classified it (schema or instance log, the schema it is assigned to, its tip).

Only the index step decides a log, so only its transactions (`pipeline_state.commit_index`
through `replace_logs`, and `commit_appended`) call these, with the rows the step staged;
with every statement that writes the table here, nothing else can reassign a log. Each
function does one write in the caller's transaction. The reads stay with the index
step's others (`pipeline_state.stored_logs`, `count_logs`).
"""

from __future__ import annotations

import psycopg
from psycopg import sql

from p2panda_assets.store.staging import Stage

# The columns of a logs row, in the order the index step gives them, with their types
# (`store.copying.Target`).
LOG_COLUMN_TYPES = (
    ("author", "bytea"),
    ("log_id", "numeric"),
    ("is_schema", "boolean"),
    ("ref_schema_id", "text"),
    ("ref_version", "numeric"),
    ("ref_hash", "bytea"),
    ("schema_id", "text"),
    ("assignment", "text"),
    ("why_reason", "text"),
    ("why_message", "text"),
    ("tip_seq", "numeric"),
    ("tip_ended", "boolean"),
    ("clean", "boolean"),
)
LOG_COLUMNS = tuple(name for name, _ in LOG_COLUMN_TYPES)
_COLUMNS = sql.SQL(", ").join(map(sql.Identifier, LOG_COLUMNS))


def forget_all_logs(conn: psycopg.Connection) -> None:
    """Empty the table: a whole index step writes every log again."""
    conn.execute("DELETE FROM p2panda.logs")


def forget_staged_logs(conn: psycopg.Connection, stage: Stage) -> int:
    """Drop the rows of the logs `stage` holds rows of: an appending index step writes
    those it touched again. How many there were."""
    cursor = conn.execute(
        sql.SQL(
            "DELETE FROM p2panda.logs l USING {} s"
            " WHERE l.author = s.author AND l.log_id = s.log_id"
        ).format(stage.identifier)
    )
    return max(cursor.rowcount, 0)


def add_staged_logs(conn: psycopg.Connection, stage: Stage) -> int:
    """Add the logs rows `stage` holds (the index step copied them there); how many."""
    cursor = conn.execute(
        sql.SQL("INSERT INTO p2panda.logs ({0}) SELECT {0} FROM {1}").format(
            _COLUMNS, stage.identifier
        )
    )
    return max(cursor.rowcount, 0)
