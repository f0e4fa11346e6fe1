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

from collections.abc import Mapping, Sequence

import psycopg

Passed = tuple[Sequence[str], Sequence[str]]  # the layers that passed, the layers current


def checked_layers(conn: psycopg.Connection, schema_id: str) -> set[str]:
    """The layers whose `schema_id` partition passed the check."""
    return checked_layers_of(conn, [schema_id])[schema_id]


def checked_layers_of(conn: psycopg.Connection, schema_ids: Sequence[str]) -> dict[str, set[str]]:
    """`checked_layers` of each of `schema_ids`, in one query."""
    rows = conn.execute(
        "SELECT schema_id, layer FROM p2panda.checked_layers WHERE schema_id = ANY(%s)",
        (list(schema_ids),),
    )
    found: dict[str, set[str]] = {schema_id: set() for schema_id in schema_ids}
    for schema_id, layer in rows:
        found[schema_id].add(layer)
    return found


def record_checked_layers(
    conn: psycopg.Connection, schema_id: str, passed: Sequence[str], current: Sequence[str]
) -> None:
    """The partition of `passed` layers passed; forget those no longer `current`."""
    record_checked_layers_of(conn, {schema_id: (passed, current)})


def record_checked_layers_of(conn: psycopg.Connection, passed: Mapping[str, Passed]) -> None:
    """`record_checked_layers` of each schema `passed` names, in one transaction."""
    with conn.transaction(), conn.cursor() as cursor:
        cursor.executemany(
            "DELETE FROM p2panda.checked_layers WHERE schema_id = %s AND NOT (layer = ANY(%s))",
            [(schema_id, list(current)) for schema_id, (_, current) in passed.items()],
        )
        cursor.executemany(
            "INSERT INTO p2panda.checked_layers (schema_id, layer) VALUES (%s, %s)"
            " ON CONFLICT DO NOTHING",
            [(schema_id, layer) for schema_id, (layers, _) in passed.items() for layer in layers],
        )


def forget_checked_layers(conn: psycopg.Connection, schema_id: str) -> None:
    """Check every layer of the partition again, next time."""
    conn.execute("DELETE FROM p2panda.checked_layers WHERE schema_id = %s", (schema_id,))
