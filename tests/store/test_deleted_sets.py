"""An increment asks the stored deleted sets about the instances it touches only
(`tables.deleted_sets` with `among`): the answer is the whole sets' answer for those
ids, and nothing of the rest of the sets comes back."""

from __future__ import annotations

import psycopg

from p2panda_assets.store.tables import deleted_sets


def _store(conn: psycopg.Connection, rows: list[tuple[str, bytes]]) -> None:
    with conn.cursor() as cursor:
        cursor.executemany(
            "INSERT INTO p2panda.deleted_instances (schema_id, instance_id) VALUES (%s, %s)",
            rows,
        )


def test_among_answers_for_the_ids_asked_only(conn: psycopg.Connection) -> None:
    stored = [("a-1", bytes([i])) for i in range(100)] + [("b-1", bytes([i])) for i in range(50)]
    _store(conn, stored)
    asked = {bytes([3]), bytes([60]), bytes([200])}
    found = sorted(deleted_sets(conn, ["a-1", "b-1"], asked))
    assert found == [("a-1", bytes([3])), ("a-1", bytes([60])), ("b-1", bytes([3]))]
    whole = deleted_sets(conn, ["a-1", "b-1"])
    assert sorted(whole) == sorted(stored)
    assert sorted(p for p in whole if p[1] in asked) == found
    assert deleted_sets(conn, ["a-1"], set()) == []
