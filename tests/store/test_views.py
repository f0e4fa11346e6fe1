"""Views by name (`store/views.py`) without Spark: hostile and over-long names, shared
names, comments, and two refreshes racing."""

from __future__ import annotations

import threading

import psycopg
import pytest
from psycopg import sql

from p2panda_assets.store.database import connect
from p2panda_assets.store.registry import register, table_identifier, table_name_for
from p2panda_assets.store.views import create_views, drop_views, refresh_views

pytestmark = pytest.mark.postgres

VIEWS = "SELECT viewname FROM pg_views WHERE schemaname = 'p2panda_api' ORDER BY 1"


def built(conn: psycopg.Connection, seed: int, name: str | None, description: str | None) -> str:
    """A registered schema with a table (as a materialization leaves it)."""
    schema_id = register(conn, bytes([seed]) * 32, seed, name).schema_id
    table = table_identifier(table_name_for(schema_id))
    conn.execute(sql.SQL("CREATE TABLE {} (_instance_id text PRIMARY KEY, x text)").format(table))
    conn.execute(sql.SQL("INSERT INTO {} VALUES ('a', 'b')").format(table))
    conn.execute(
        "UPDATE p2panda.schemas SET status = 'materialized', version = 2, description = %s"
        " WHERE schema_id = %s",
        (description, schema_id),
    )
    refresh_views(conn)
    return schema_id


def registry_views(conn: psycopg.Connection) -> dict[str, tuple[str | None, str | None]]:
    rows = conn.execute("SELECT schema_id, view_name, view_conflict FROM p2panda.schemas")
    return {schema_id: (view, conflict) for schema_id, view, conflict in rows}


def test_a_hostile_name_is_a_view_name_and_nothing_else(conn: psycopg.Connection) -> None:
    name = 'x"; DROP TABLE p2panda.entries; --'
    schema_id = built(conn, 1, name, 'it\'s a "description"; DROP TABLE p2panda.schemas')
    assert conn.execute(VIEWS).fetchall() == [(name,)]
    assert conn.execute(
        sql.SQL("SELECT x FROM {}").format(sql.Identifier("p2panda_api", name))
    ).fetchall() == [("b",)]
    comment = conn.execute(
        "SELECT obj_description(%s::regclass)",
        (sql.Identifier("p2panda_api", name).as_string(conn),),
    ).fetchone()[0]
    assert comment == 'it\'s a "description"; DROP TABLE p2panda.schemas'
    assert registry_views(conn)[schema_id] == (name, None)
    assert conn.execute("SELECT count(*) FROM p2panda.entries").fetchone() == (0,)


def test_a_name_over_63_bytes_gets_no_view_and_says_why(conn: psycopg.Connection) -> None:
    schema_id = built(conn, 2, "n" * 64, None)
    assert conn.execute(VIEWS).fetchall() == []
    view, conflict = registry_views(conn)[schema_id]
    assert view is None and "longer than 63 bytes" in conflict


def test_a_shared_name_gives_neither_schema_a_view_until_one_is_renamed(
    conn: psycopg.Connection,
) -> None:
    first = built(conn, 3, "notes", None)
    assert conn.execute(VIEWS).fetchall() == [("notes",)]
    second = built(conn, 4, "notes", None)
    assert conn.execute(VIEWS).fetchall() == []
    views = registry_views(conn)
    assert views[first][1] == views[second][1]
    assert f"shared by schemas {min(first, second)}, {max(first, second)}" in views[first][1]
    register(conn, bytes([4]) * 32, 4, "other notes")
    assert conn.execute(VIEWS).fetchall() == [("notes",), ("other notes",)]
    assert registry_views(conn) == {first: ("notes", None), second: ("other notes", None)}


def test_two_refreshes_at_once_both_succeed(conn: psycopg.Connection, database_url: str) -> None:
    """The first creates a view the second cannot see yet: unserialized, the second
    would create it too and fail on the first's commit ("already exists")."""
    built(conn, 5, "notes", None)
    with conn.transaction():
        drop_views(conn)  # committed: no view
    errors: list[BaseException] = []
    with connect(database_url, autocommit=True) as first:
        with first.transaction():
            drop_views(first)
            create_views(first)

            def second_refresh() -> None:
                try:
                    with connect(database_url, autocommit=True) as second:
                        refresh_views(second)  # waits for the first to commit
                except BaseException as error:
                    errors.append(error)

            racer = threading.Thread(target=second_refresh)
            racer.start()
            racer.join(timeout=1)
            assert racer.is_alive()  # blocked on the refresh lock
        racer.join(timeout=30)
    assert not racer.is_alive() and errors == []
    assert conn.execute(VIEWS).fetchall() == [("notes",)]
