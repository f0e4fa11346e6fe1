"""A whole build's swap adds its staged instance accounts by a plain INSERT, and by the
upsert when another schema still holds an entry's account: the rows end the same."""

from __future__ import annotations

import psycopg
import pytest
from psycopg import sql

from p2panda_assets.store import tables

pytestmark = pytest.mark.postgres

ROWS = [(bytes([n]) * 34, "applied" if n % 2 else "superseded") for n in range(1, 6)]


def stage_accounts(conn: psycopg.Connection, schema_id: str) -> tables.Stage:
    stage = tables.create_shared_stage(conn, "stage_test_accounts", "accounts")
    for entry, state in ROWS:
        conn.execute(
            sql.SQL(
                "INSERT INTO {} (hash, schema_id, state, reason, message)"
                " VALUES (%s, %s, %s, NULL, '')"
            ).format(stage.identifier),
            (entry, schema_id, state),
        )
    return stage


def stored(conn: psycopg.Connection) -> list[tuple[object, ...]]:
    return conn.execute(
        "SELECT hash, schema_id, state, reason, message, origin FROM p2panda.accounts ORDER BY hash"
    ).fetchall()


@pytest.mark.parametrize("held_by_another", [False, True])
def test_staged_instance_accounts_are_added_whoever_held_an_entry(
    conn: psycopg.Connection, held_by_another: bool
) -> None:
    conn.execute(
        "INSERT INTO p2panda.accounts (hash, schema_id, state, origin)"
        " VALUES (%s, 'other', 'applied', 'instance')",
        (bytes([99]) * 34,),
    )
    if held_by_another:  # the entry's log was assigned to `other` when it was built
        conn.execute(
            "INSERT INTO p2panda.accounts (hash, schema_id, state, reason, message, origin)"
            " VALUES (%s, 'other', 'pending', 'awaiting-schema', 'x', 'instance')",
            (ROWS[2][0],),
        )
    stage = stage_accounts(conn, "mine")
    with conn.transaction():
        tables.insert_instance_accounts(conn, stage, "mine")
    expected = [(entry, "mine", state, None, "", "instance") for entry, state in ROWS]
    expected.append((bytes([99]) * 34, "other", "applied", None, None, "instance"))
    assert stored(conn) == expected
