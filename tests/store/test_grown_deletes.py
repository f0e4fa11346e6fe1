"""A table's cascades are up to date while the deleted sets they read only grew: the ids
added since its build are found by their marks (`tables.grown_deletes`), and a set that
lost or rewrote an id since is told apart (the table is then built whole)."""

from __future__ import annotations

import psycopg

from p2panda_assets.store import deleted_instances as deleted_sql
from p2panda_assets.store import tables
from p2panda_assets.store.tables import BuildState

PROFILES, TAGS = "profiles", "tags"


def ids(*seeds: int) -> list[bytes]:
    return [bytes([seed]) * 34 for seed in seeds]


def written_with(conn: psycopg.Connection, *sources: str) -> BuildState:
    """A table's build state, written with the current deleted sets of `sources`."""
    return BuildState(1, "digest", "lens", sources, tables.deleted_key(conn, sources))


def test_the_ids_added_since_are_found_while_the_sets_only_grow(conn: psycopg.Connection) -> None:
    deleted_sql.add_deleted(conn, PROFILES, ids(1, 2))
    state = written_with(conn, PROFILES, TAGS)
    assert tables.grown_deletes(conn, state, [PROFILES, TAGS]) == set()
    deleted_sql.add_deleted(conn, PROFILES, ids(3))
    deleted_sql.add_deleted(conn, TAGS, ids(4))
    deleted_sql.add_deleted(conn, PROFILES, ids(1))  # already there: nothing joins
    assert tables.grown_deletes(conn, state, [PROFILES, TAGS]) == set(ids(3, 4))
    assert tables.cascades_changed(conn, state, [PROFILES, TAGS])


def test_a_set_written_again_or_smaller_is_not_growth(conn: psycopg.Connection) -> None:
    deleted_sql.add_deleted(conn, PROFILES, ids(1, 2))
    state = written_with(conn, PROFILES)
    # A whole build writes the set again: the same ids, new marks.
    deleted_sql.forget_deleted_set(conn, PROFILES)
    deleted_sql.add_deleted(conn, PROFILES, ids(1, 2, 3))
    assert tables.grown_deletes(conn, state, [PROFILES]) is None
    state = written_with(conn, PROFILES)
    conn.execute("DELETE FROM p2panda.deleted_instances WHERE instance_id = %s", (ids(2)[0],))
    assert tables.grown_deletes(conn, state, [PROFILES]) is None


def test_a_state_of_an_older_key_or_other_sources_is_built_whole(conn: psycopg.Connection) -> None:
    older = BuildState(1, "digest", "lens", (PROFILES,), "profiles=2:0cc175b9c0f1b6a8")
    assert tables.grown_deletes(conn, older, [PROFILES]) is None
    assert tables.grown_deletes(conn, BuildState(1, "d", "l"), [PROFILES]) is None
    assert tables.grown_deletes(conn, written_with(conn, TAGS), [PROFILES]) is None
