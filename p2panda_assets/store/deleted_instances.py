"""The one writer of `p2panda.deleted_instances`: the instances deleted in each built
schema (by a delete or a cascade), which the schemas relating to it read for their own
cascades, and whose key a table's build state records.

A schema's set changes only with its table: in a build's swap or increment, or when it
is unregistered; with every statement that writes the table here, nothing else changes
what other schemas cascade from. Each function does one write in the caller's
transaction (`tables.swap_schemas`, `apply_increment`, `unregister.unregister`). The
reads stay with the builds that make them (`tables.deleted_sets`, `deleted_key`).
"""

from __future__ import annotations

from collections.abc import Sequence

import psycopg
from psycopg import sql


def forget_deleted_set(conn: psycopg.Connection, schema_id: str) -> int:
    """Drop the schema's deleted set; how many rows it had."""
    return conn.execute(
        "DELETE FROM p2panda.deleted_instances WHERE schema_id = %s", (schema_id,)
    ).rowcount


def add_staged_deleted(conn: psycopg.Connection, staged: sql.Identifier, schema_id: str) -> None:
    """The schema's rows of a whole build's staged deleted sets (after
    `forget_deleted_set`)."""
    conn.execute(
        sql.SQL(
            "INSERT INTO p2panda.deleted_instances (schema_id, instance_id)"
            " SELECT schema_id, instance_id FROM {} WHERE schema_id = %s"
        ).format(staged),
        (schema_id,),
    )


def add_deleted(conn: psycopg.Connection, schema_id: str, instance_ids: Sequence[bytes]) -> None:
    """Add `instance_ids` to the schema's deleted set (an increment's deletes)."""
    conn.execute(
        "INSERT INTO p2panda.deleted_instances (schema_id, instance_id)"
        " SELECT %s, unnest(%s::bytea[]) ON CONFLICT DO NOTHING",
        (schema_id, list(instance_ids)),
    )
