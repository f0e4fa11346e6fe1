"""The one writer of `p2panda.checked_layers`: which chained layers of each schema's
partition passed the blocking decoded-messages check (`defs.checks.decoded`).

A layer is written once, under a name of its own, and never changes; a merge or a
whole chaining writes new layers. So a check reads only the layers of its partition it
has not passed yet: what the runs since added, not every message of the schema again.
What it cannot see across layers (an entry in two of them), the index step rules out:
appending continues each log after its tip, and a merge moves messages, never copies
them.
"""

from __future__ import annotations

from collections.abc import Sequence

import psycopg


def checked_layers(conn: psycopg.Connection, schema_id: str) -> set[str]:
    """The layers whose `schema_id` partition passed the check."""
    rows = conn.execute(
        "SELECT layer FROM p2panda.checked_layers WHERE schema_id = %s", (schema_id,)
    )
    return {layer for (layer,) in rows}


def record_checked_layers(
    conn: psycopg.Connection, schema_id: str, passed: Sequence[str], current: Sequence[str]
) -> None:
    """The partition of `passed` layers passed; forget those no longer `current`."""
    with conn.transaction():
        conn.execute(
            "DELETE FROM p2panda.checked_layers WHERE schema_id = %s AND NOT (layer = ANY(%s))",
            (schema_id, list(current)),
        )
        with conn.cursor() as cursor:
            cursor.executemany(
                "INSERT INTO p2panda.checked_layers (schema_id, layer) VALUES (%s, %s)"
                " ON CONFLICT DO NOTHING",
                [(schema_id, layer) for layer in passed],
            )


def forget_checked_layers(conn: psycopg.Connection, schema_id: str) -> None:
    """Check every layer of the partition again, next time."""
    conn.execute("DELETE FROM p2panda.checked_layers WHERE schema_id = %s", (schema_id,))
