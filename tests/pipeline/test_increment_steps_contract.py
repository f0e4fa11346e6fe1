"""An increment's two paths keep one contract (issue 55): every method of
`IncrementSteps` runs on `SparkSteps` and on `DriverSteps` over the same store, after the
same index step, and gives back the same keys, the same reduced rows and the same staged
rows and accounts. A rule changed in one path only fails here by the method's name."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from pyspark.sql import Row as SparkRow
from pyspark.sql import SparkSession

from p2panda_assets.pipeline.build.columns import pg_type
from p2panda_assets.pipeline.build.paths import DriverSteps, IncrementSteps, SparkSteps
from p2panda_assets.pipeline.build.reduction import COLLECTED
from p2panda_assets.pipeline.build.staging import row_target
from p2panda_assets.pipeline.index.step import IndexResult, run_index
from p2panda_assets.pipeline.run import run_pipeline
from p2panda_assets.protocol.ids import parse_schema_id
from p2panda_assets.store import tables
from p2panda_assets.store.ingest import ingest
from p2panda_assets.store.pipeline_state import pipeline_state
from p2panda_assets.store.registry import register, table_name_for
from p2panda_assets.store.staging import drop_tables
from p2panda_assets.testing.builder import CorpusBuilder, create_field, instances
from tests.pipeline.test_pipeline_matches_engine import empty_store

pytestmark = [pytest.mark.spark, pytest.mark.postgres]


def a_store_and_its_increment() -> tuple[CorpusBuilder, int, str]:
    """Notes in several logs, then an increment that updates one, deletes another and
    creates a third; the index of the first part's last entry."""
    corpus = CorpusBuilder()
    note = corpus.author(1).schema(1, "note")
    note.migrate(create_field("title", "text", default=""))
    mary, joe = instances(corpus.author(2), 1), instances(corpus.author(3), 1)
    first = mary.create(note.ref(), title="first")
    second = joe.create(note.ref(), title="second")
    joe.create(note.ref(), title="third")
    cut = len(corpus.pairs)
    mary.update(note.ref(), first, title="first, again")
    joe.delete(second, note.ref())
    instances(corpus.author(4), 1).create(note.ref(), title="fourth")
    return corpus, cut, note.schema_id


@dataclass
class Store:
    conn: psycopg.Connection
    url: str
    index: IndexResult
    schema_id: str
    after: int  # the batch the table was built through


@pytest.fixture(scope="module")
def store(spark: SparkSession, session_database: str) -> Iterator[Store]:
    corpus, cut, schema_id = a_store_and_its_increment()
    with empty_store(session_database) as conn:
        register(conn, *parse_schema_id(schema_id), None)
        ingest(conn, corpus.pairs[:cut])
        run_pipeline(spark, conn, session_database)
        after = pipeline_state(conn).batch
        ingest(conn, corpus.pairs[cut:])
        index = run_index(spark, conn, session_database)
        yield Store(conn, session_database, index, schema_id, after)


def plain(row: Any) -> dict[str, Any]:
    """A reduced row by the columns the protocol promises (`reduction.COLLECTED`): Spark's
    rows carry an owner row's log besides, which the increment does not read."""
    values = row.asDict() if isinstance(row, SparkRow) else dict(row)
    return {column: values[column] for column in COLLECTED}


@dataclass
class Walk:
    keys: set[bytes]
    reduced: list[dict[str, Any]]
    rows: list[tuple[Any, ...]]
    accounts: list[tuple[Any, ...]]


def walk(steps: IncrementSteps, store: Store, name: str) -> Walk:
    conn, catalog = store.conn, store.index.catalog
    lens = catalog.histories[store.schema_id].lens
    schema, _ = tables.split_table_name(table_name_for(store.schema_id))
    columns = [(field, pg_type(spec.type)) for field, spec in lens.items()]
    rows_stage = tables.create_stage(conn, schema, f"stage_contract_{name}", columns)
    accounts = tables.create_shared_stage(conn, f"stage_contract_{name}_accounts", "accounts")
    try:
        keys = steps.new_keys(store.index.layers, store.after)
        reduced = [plain(row) for row in steps.reduce({store.schema_id: store.after}, keys)]
        targets = {store.schema_id: row_target(rows_stage, lens)}
        result = steps.stage(store.url, [store.schema_id], [], targets, accounts)
        assert not result.errors
        staged = conn.execute(f"SELECT * FROM {schema}.{rows_stage.name}").fetchall()
        staged_accounts = conn.execute(
            f"SELECT hash, schema_id, state, reason, message FROM p2panda.{accounts.name}"
        ).fetchall()
    finally:
        steps.close()
        drop_tables(conn, [rows_stage, accounts])
    return Walk(
        keys,
        sorted(reduced, key=lambda row: repr(sorted(row.items()))),
        sorted(staged, key=repr),
        sorted(staged_accounts, key=repr),
    )


@pytest.fixture(scope="module")
def walks(spark: SparkSession, store: Store) -> dict[str, Walk]:
    catalog = store.index.catalog
    return {
        "spark": walk(SparkSteps(spark, store.index, catalog), store, "spark"),
        "driver": walk(DriverSteps(store.index, catalog), store, "driver"),
    }


def test_the_increment_has_what_the_contract_needs(walks: dict[str, Walk]) -> None:
    """An update, a delete and a create: three instances named anew."""
    assert len(walks["driver"].keys) == 3
    assert walks["driver"].rows and walks["driver"].accounts


def test_the_new_keys_are_the_same(walks: dict[str, Walk]) -> None:
    assert walks["spark"].keys == walks["driver"].keys


def test_the_reduced_rows_are_the_same(walks: dict[str, Walk]) -> None:
    assert walks["spark"].reduced == walks["driver"].reduced


def test_the_staged_rows_are_the_same(walks: dict[str, Walk]) -> None:
    assert walks["spark"].rows == walks["driver"].rows


def test_the_staged_accounts_are_the_same(walks: dict[str, Walk]) -> None:
    assert walks["spark"].accounts == walks["driver"].accounts
