"""The one writer of `p2panda.schema_versions`: the version tables `panda materialize
--as-of-version` built (`p2panda_versions`), and the view each one got.

A row changes with its table's swap (`tables.swap_version`), with the views made again
(`views.create_views`), and goes when its schema is unregistered
(`unregister.unregister`); with every statement that writes the table here, the row and
its table cannot be changed apart elsewhere. Each function does one write in the
caller's transaction.
"""

from __future__ import annotations

from typing import NamedTuple

import psycopg


def record_version(
    conn: psycopg.Connection,
    schema_id: str,
    version: int,
    version_hash: str,
    table_name: str,
    rows: int,
) -> None:
    """The schema's table as of `version` is `table_name`, of `rows` rows."""
    conn.execute(
        """
        INSERT INTO p2panda.schema_versions
            (schema_id, version, version_hash, table_name, rows)
        VALUES (%s, %s, %s, %s, %s)
        ON CONFLICT (schema_id, version) DO UPDATE
            SET version_hash = EXCLUDED.version_hash, rows = EXCLUDED.rows,
                materialized_at = now()
        """,
        (schema_id, version, version_hash, table_name, rows),
    )


def forget_version(conn: psycopg.Connection, schema_id: str, version: int) -> None:
    """The schema has no table as of `version` (the version has no field)."""
    conn.execute(
        "DELETE FROM p2panda.schema_versions WHERE schema_id = %s AND version = %s",
        (schema_id, version),
    )


def forget_versions(conn: psycopg.Connection, schema_id: str) -> list[tuple[int, str]]:
    """Drop every version row of the schema; (version, table name) of each."""
    return conn.execute(
        "DELETE FROM p2panda.schema_versions WHERE schema_id = %s RETURNING version, table_name",
        (schema_id,),
    ).fetchall()


def clear_view_names(conn: psycopg.Connection) -> None:
    """No version table has a view (the views are being made again)."""
    conn.execute("UPDATE p2panda.schema_versions SET view_name = NULL")


def record_view_name(
    conn: psycopg.Connection, schema_id: str, version: int, view_name: str | None
) -> None:
    """The view the schema's table as of `version` got (None: none)."""
    conn.execute(
        "UPDATE p2panda.schema_versions SET view_name = %s WHERE schema_id = %s AND version = %s",
        (view_name, schema_id, version),
    )


class VersionTable(NamedTuple):
    """A schema's table as of one version: its rows, its name, and its view if it has one."""

    rows: int
    table_name: str
    view_name: str | None


def version_table(conn: psycopg.Connection, schema_id: str, version: int) -> VersionTable | None:
    """The table `panda materialize --as-of-version` built for `version`, None if none (the
    version has no field)."""
    row = conn.execute(
        "SELECT rows, table_name, view_name FROM p2panda.schema_versions"
        " WHERE schema_id = %s AND version = %s",
        (schema_id, version),
    ).fetchone()
    return None if row is None else VersionTable(*row)
