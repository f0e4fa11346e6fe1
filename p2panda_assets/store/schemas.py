"""The one writer of `p2panda.schemas`, the registry: one row per registered schema,
saying what its table holds, how it was built and which view it got.

A row is added by a registration (`registry.register`), says each build's outcome in the
transaction of its swap (`tables.update_registry`), names its view when the views are
made again (`views.create_views`), and goes when the schema is unregistered
(`unregister.unregister`). With every statement that writes the table here, the
registry's columns are written in one place, whichever step writes them; not in
`registry.py`, which reads the registry and which `views.py` cannot import (`registry`
imports `views`). Each function does one write in the caller's transaction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import psycopg
from psycopg.types.json import Jsonb


def add_registration(
    conn: psycopg.Connection,
    schema_id: str,
    author: bytes,
    log_id: int,
    registered_name: str | None,
    name: str | None,
    table_name: str,
    status: str,
) -> tuple[str | None, bool]:
    """The schema's row, or only its registered name if it has one already (kept when
    `registered_name` is None): (the registered name now, whether the row is new). A
    new row starts with the schema's own `name` as the store holds it, so that a later
    registration sees the name it is known by before its first build."""
    row = conn.execute(
        """
        INSERT INTO p2panda.schemas
            (schema_id, author, log_id, registered_name, name, table_name, status)
        VALUES (%s, %s, %s, %s, %s, %s, %s)
        ON CONFLICT (schema_id) DO UPDATE
            SET registered_name = coalesce(EXCLUDED.registered_name,
                                           p2panda.schemas.registered_name)
        RETURNING registered_name, xmax = 0
        """,
        (schema_id, author, log_id, registered_name, name, table_name, status),
    ).fetchone()
    assert row is not None
    return row[0], row[1]


def record_outcome(
    conn: psycopg.Connection,
    schema_id: str,
    *,
    name: str | None,
    description: str | None,
    migrations: Mapping[str, str],
    table_name: str,
    status: str,
    status_message: str | None,
    upstream: Sequence[str],
) -> None:
    """What the schema's last build found and how it ended: every build writes it."""
    conn.execute(
        """
        UPDATE p2panda.schemas SET name = %s, description = %s, migrations = %s,
          table_name = %s, status = %s, status_message = %s, upstream = %s
        WHERE schema_id = %s
        """,
        (
            name,
            description,
            Jsonb(dict(migrations)),
            table_name,
            status,
            status_message,
            list(upstream),
            schema_id,
        ),
    )


def built_rows(conn: psycopg.Connection, schema_id: str) -> int:
    """The rows the schema's built table held when it was last written."""
    row = conn.execute(
        "SELECT rows FROM p2panda.schemas WHERE schema_id = %s", (schema_id,)
    ).fetchone()
    assert row is not None and row[0] is not None  # written with the table's build state
    return int(row[0])


def record_built_table(
    conn: psycopg.Connection,
    schema_id: str,
    *,
    version: int | None,
    version_hash: str | None,
    rows: int,
    fallbacks: Mapping[str, int],
    fingerprint: str | None,
    state: Mapping[str, object] | None,
    incremental: bool,
    path: str | None,
) -> None:
    """What the schema's table holds now and what it was built from, at the time of its
    own swap (`clock_timestamp()`): only a build that wrote the table writes it."""
    conn.execute(
        """
        UPDATE p2panda.schemas SET version = %s, version_hash = %s, rows = %s, fallbacks = %s,
          materialized_at = clock_timestamp(), built_fingerprint = %s, built_state = %s,
          built_incrementally = %s, built_path = %s
        WHERE schema_id = %s
        """,
        (
            version,
            version_hash,
            rows,
            Jsonb(dict(fallbacks)),
            fingerprint,
            None if state is None else Jsonb(dict(state)),
            incremental,
            path,
            schema_id,
        ),
    )


def forget_schema(conn: psycopg.Connection, schema_id: str) -> None:
    """Drop the schema's row (it is unregistered)."""
    conn.execute("DELETE FROM p2panda.schemas WHERE schema_id = %s", (schema_id,))


def forget_build_states(conn: psycopg.Connection) -> None:
    """No table's build state is known: the next build of every schema is whole
    (`pipeline.build.increments` takes a schema without one as one to build whole)."""
    conn.execute("UPDATE p2panda.schemas SET built_state = NULL WHERE built_state IS NOT NULL")


def clear_view_names(conn: psycopg.Connection) -> None:
    """No schema has a view, nor a reason for having none (the views are being made
    again)."""
    conn.execute("UPDATE p2panda.schemas SET view_name = NULL, view_conflict = NULL")


def record_view(
    conn: psycopg.Connection, schema_id: str, view_name: str | None, conflict: str | None
) -> None:
    """The view the schema's table got, or why it got none."""
    conn.execute(
        "UPDATE p2panda.schemas SET view_name = %s, view_conflict = %s WHERE schema_id = %s",
        (view_name, conflict, schema_id),
    )
