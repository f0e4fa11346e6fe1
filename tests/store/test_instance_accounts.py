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
    stage = tables.create_account_stage(conn, "stage_test_accounts", [schema_id])
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


def test_an_account_stage_holds_each_schema_in_a_partition_and_no_other_schema(
    conn: psycopg.Connection,
) -> None:
    stage = tables.create_account_stage(conn, "stage_test_accounts", ["mine", "yours"])
    insert = sql.SQL(
        "INSERT INTO {} (hash, schema_id, state, message) VALUES (%s, %s, 'applied', '')"
    ).format(stage.identifier)
    for n, schema_id in enumerate(["mine", "yours", "yours"]):
        conn.execute(insert, (bytes([n]) * 34, schema_id))
    held = conn.execute(
        sql.SQL(
            "SELECT tableoid::regclass::text, schema_id, count(*) FROM {} GROUP BY 1, 2 ORDER BY 1"
        ).format(stage.identifier)
    ).fetchall()
    assert held == [
        ("p2panda.stage_test_accounts_0", "mine", 1),
        ("p2panda.stage_test_accounts_1", "yours", 2),
    ]
    with pytest.raises(psycopg.errors.CheckViolation):  # no partition holds it
        conn.execute(insert, (bytes([9]) * 34, "theirs"))
