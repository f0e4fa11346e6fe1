"""Comparing what the pipeline wrote to PostgreSQL with what the engine computes."""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import datetime
from decimal import Decimal

import psycopg
from psycopg import sql

from p2panda_assets.engine.corpus import Corpus, _check_all
from p2panda_assets.engine.values import to_json
from p2panda_assets.store.catalog import stored_catalog
from p2panda_assets.store.pipeline_state import count_good_entries
from p2panda_assets.store.registry import table_name_for


def normal(value: object) -> object:
    """One comparable form for engine values and PostgreSQL values."""
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        return [normal(v) for v in value]
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, (bytes, memoryview)):
        return bytes(value).hex()
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, Decimal):
        return int(value)
    return value


def engine_tables(corpus: Corpus) -> dict[str, list[tuple]]:
    tables = {}
    for schema_id, table in corpus.tables.items():
        if table.dropped:
            continue
        rows = []
        for row in table.rows:
            values = [normal(row.values[name]) for name in table.history.lens]
            rows.append(
                (
                    row.instance_id.hex(),
                    row.author.hex(),
                    row.version,
                    row.seq,
                    row.entry.hex(),
                    *values,
                )
            )
        tables[schema_id] = rows
    return tables


def pg_tables(conn: psycopg.Connection, schema_ids: list[str]) -> dict[str, list[tuple]]:
    """The rows of each materialized table; the registry's count of them must be right
    (an increment counts them from it, `store.tables.apply_increment`)."""
    tables = {}
    for schema_id in schema_ids:
        status, counted = conn.execute(
            "SELECT status, rows FROM p2panda.schemas WHERE schema_id = %s", (schema_id,)
        ).fetchone()
        if status != "materialized":
            continue
        schema, name = table_name_for(schema_id).split(".")
        rows = conn.execute(
            sql.SQL("SELECT * FROM {} ORDER BY _instance_id").format(sql.Identifier(schema, name))
        ).fetchall()
        assert counted == len(rows), f"{schema_id}: the registry counts {counted} rows"
        tables[schema_id] = [tuple(normal(v) for v in row) for row in rows]
    return tables


def engine_accounts(corpus: Corpus) -> dict[str, tuple]:
    return {
        h.hex(): (a.schema_id, str(a.state), None if a.reason is None else str(a.reason), a.message)
        for h, a in corpus.accounts.items()
    }


def pg_accounts(conn: psycopg.Connection) -> dict[str, tuple]:
    rows = conn.execute("SELECT hash, schema_id, state, reason, message FROM p2panda.accounts")
    return {bytes(h).hex(): (s, st, r, m or "") for h, s, st, r, m in rows}


def pg_deleted(conn: psycopg.Connection, schema_ids: list[str]) -> dict[str, set[bytes]]:
    """The stored deleted sets of the built schemas among `schema_ids` (a schema whose
    fields were all removed has no table, and a deleted set all the same)."""
    deleted: dict[str, set[bytes]] = {
        schema_id: set()
        for (schema_id,) in conn.execute(
            "SELECT schema_id FROM p2panda.schemas"
            " WHERE schema_id = ANY(%s) AND status IN ('materialized', 'dropped')",
            (schema_ids,),
        )
    }
    rows = conn.execute(
        "SELECT schema_id, instance_id FROM p2panda.deleted_instances WHERE schema_id = ANY(%s)",
        (list(deleted),),
    )
    for schema_id, instance_id in rows:
        deleted[schema_id].add(bytes(instance_id))
    return deleted


def engine_deleted(corpus: Corpus, schema_ids: list[str]) -> dict[str, set[bytes]]:
    """The engine's deleted sets of the built schemas among `schema_ids`."""
    return {s: corpus.deleted[s] for s in schema_ids if s in corpus.tables}


def assert_stored_index_equals(
    conn: psycopg.Connection, pairs: Iterable[tuple[bytes, bytes | None]], expected: Corpus
) -> None:
    """What the sensors and the plan read without Spark equals the engine's: the schema
    logs folded from the entries verification found good, and how many of those there are."""
    assert stored_catalog(conn).histories == expected.histories
    good, _ = _check_all(pairs, Corpus())
    assert count_good_entries(conn) == len(good)


__all__ = [
    "assert_stored_index_equals",
    "engine_accounts",
    "engine_deleted",
    "engine_tables",
    "pg_accounts",
    "pg_deleted",
    "pg_tables",
    "to_json",
]
