"""The registry: table names from schema ids (never from names), registration, and the
per-schema accounting `panda status` shows."""

from __future__ import annotations

import re

import psycopg
import pytest
from psycopg import sql

from p2panda_assets.errors import P2pandaError, Reason
from p2panda_assets.store.registry import (
    StatusRow,
    StoreTotals,
    register,
    registered_schemas,
    status_rows,
    store_totals,
    table_identifier,
    table_name_for,
)

AUTHOR = bytes.fromhex("ab" * 32)
SCHEMA_ID = f"{'ab' * 32}-5"
MAX_SCHEMA_ID = f"{'ff' * 32}-{2**64 - 1}"


def test_table_name_comes_from_the_schema_id() -> None:
    assert table_name_for(SCHEMA_ID) == f"p2panda_data.s_{'ab' * 16}_5"


def test_table_names_fit_postgres_and_need_no_quoting() -> None:
    table = table_name_for(MAX_SCHEMA_ID).split(".", 1)[1]
    assert len(table.encode()) <= 63
    assert re.fullmatch(r"[a-z_][a-z0-9_]*", table)


@pytest.mark.parametrize(
    "schema_id",
    ["AB" * 32 + "-5", "ab" * 32, "ab" * 31 + "-5", f"{'ab' * 32}-{2**64}", f"{'ab' * 32}-05"],
)
def test_table_name_refuses_what_is_not_a_schema_id(schema_id: str) -> None:
    with pytest.raises(P2pandaError) as error:
        table_name_for(schema_id)
    assert error.value.reason is Reason.BAD_VALUE


@pytest.mark.postgres
def test_table_names_are_usable_in_sql_as_written(conn: psycopg.Connection) -> None:
    name = table_name_for(MAX_SCHEMA_ID)
    conn.execute(f"CREATE TABLE {name} (x int)")  # as written: no quoting needed
    conn.execute(sql.SQL("INSERT INTO {} VALUES (7)").format(table_identifier(name)))
    assert conn.execute(f"SELECT x FROM {name}").fetchone() == (7,)


@pytest.mark.postgres
def test_register_then_register_again_changes_only_the_name(conn: psycopg.Connection) -> None:
    first = register(conn, AUTHOR, 5, "notes")
    assert (first.schema_id, first.created, first.registered_name) == (SCHEMA_ID, True, "notes")
    conn.execute("UPDATE p2panda.schemas SET status = 'materialized', version = 3")
    again = register(conn, AUTHOR, 5, "notes 2")
    assert (again.created, again.registered_name) == (False, "notes 2")
    assert register(conn, AUTHOR, 5, None).registered_name == "notes 2"  # kept
    [row] = registered_schemas(conn)
    assert (row.schema_id, row.log_id, row.author) == (SCHEMA_ID, 5, AUTHOR)
    assert (row.status, row.version, row.table_name) == ("materialized", 3, first.table_name)


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("author", "log_id", "name", "reason"),
    [
        (AUTHOR[:31], 1, None, Reason.BAD_VALUE),
        (AUTHOR, -1, None, Reason.BAD_VALUE),
        (AUTHOR, 2**64, None, Reason.BAD_VALUE),
        (AUTHOR, 1, "", Reason.BAD_NAME),
        (AUTHOR, 1, "x" * 65, Reason.BAD_NAME),
        (AUTHOR, 1, "tab\tname", Reason.BAD_NAME),
    ],
)
def test_register_validates(conn, author: bytes, log_id: int, name, reason: Reason) -> None:
    with pytest.raises(P2pandaError) as error:
        register(conn, author, log_id, name)
    assert error.value.reason is reason
    assert registered_schemas(conn) == []


@pytest.mark.postgres
def test_a_name_is_data_never_sql(conn: psycopg.Connection) -> None:
    name = "x'); DROP TABLE p2panda.entries; --"
    assert register(conn, AUTHOR, 1, name).registered_name == name
    assert conn.execute("SELECT count(*) FROM p2panda.entries").fetchone() == (0,)


def account(conn, hash_: bytes, schema_id: str | None, state: str) -> None:
    conn.execute("INSERT INTO p2panda.entries (hash, entry) VALUES (%s, %s)", (hash_, b"e" + hash_))
    if state != "none":
        conn.execute(
            "INSERT INTO p2panda.accounts (hash, schema_id, state) VALUES (%s, %s, %s)",
            (hash_, schema_id, state),
        )


@pytest.mark.postgres
def test_status_counts_where_each_entry_ended(conn: psycopg.Connection) -> None:
    register(conn, AUTHOR, 5, "notes")
    other = register(conn, bytes(32), 9, None).schema_id
    conn.execute("UPDATE p2panda.schemas SET name = 'meta', version = 2, rows = 1")
    states = ["applied", "applied", "superseded", "pending", "rejected", "rejected", "rejected"]
    for i, state in enumerate(states):
        account(conn, bytes([i]), SCHEMA_ID, state)
    account(conn, b"\x50", None, "rejected")  # undecodable: no schema
    account(conn, b"\x51", f"{'cd' * 32}-1", "pending")  # a schema nobody registered
    account(conn, b"\x52", None, "none")  # not processed yet
    account(conn, b"\x53", None, "none")
    assert status_rows(conn) == sorted(
        [
            StatusRow(
                SCHEMA_ID, "notes", 2, "registered", 1, 2, 1, 1, 3, 7, 0, 0, 0, None, None, None
            ),
            StatusRow(other, "meta", 2, "registered", 1, 0, 0, 0, 0, 0, 0, 0, 0, None, None, None),
        ],
        key=lambda row: row.schema_id,
    )
    assert store_totals(conn) == StoreTotals(
        unprocessed=2,
        unregistered_applied=0,
        unregistered_superseded=0,
        unregistered_pending=1,
        unregistered_rejected=1,
    )
