"""A staged table is swapped in as it is: it must already be what a materialized table
is, a permanent (crash-safe, WAL-logged) relation, with its key."""

from __future__ import annotations

import psycopg
import pytest

from p2panda_assets.store import tables

pytestmark = pytest.mark.postgres


def persistence(conn: psycopg.Connection, relation: str) -> str:
    row = conn.execute(
        "SELECT relpersistence FROM pg_class WHERE oid = to_regclass(%s)", (relation,)
    ).fetchone()
    assert row is not None
    return str(row[0])


def test_a_swapped_in_table_and_its_key_are_permanent(conn: psycopg.Connection) -> None:
    stage = tables.create_stage(conn, "p2panda_data", "stage_test_0", [("title", "text")])
    tables.index_stage(conn, stage)
    with conn.transaction():
        tables.replace_table(conn, "p2panda_data.t_test", stage)
    assert persistence(conn, "p2panda_data.t_test") == "p"
    assert persistence(conn, "p2panda_data.t_test_pkey") == "p"
