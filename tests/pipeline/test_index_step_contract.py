"""The index step's two paths keep one contract (issue 55): every method of `IndexSteps`
runs on `SparkIndexSteps` and on `DriverIndexSteps` over the same verified batches, and
what each gives back is the same once both are read as rows. A rule changed in one path
only (the accepted entries, the accounts, the layer's columns) fails here by name of the
method, before any end-to-end property test would find it.

Spark's side takes its Spark jobs here (`chain_logs`, not the rows collected to the
driver), so the two implementations share nothing but the kernels."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import psycopg
import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession

from p2panda_assets.engine.corpus import Catalog, LogKey
from p2panda_assets.pipeline.columnar.layers import read_layers
from p2panda_assets.pipeline.columnar.warehouse import Warehouse
from p2panda_assets.pipeline.index.accounts import schema_account_rows
from p2panda_assets.pipeline.index.log_plan import STORED, PlanTotals
from p2panda_assets.pipeline.index.paths import DriverIndexSteps, IndexSteps, SparkIndexSteps
from p2panda_assets.pipeline.index.verify import current_warehouse, verify_new_entries
from p2panda_assets.pipeline.kernels.batches import Row, python_rows
from p2panda_assets.protocol.ids import parse_schema_id
from p2panda_assets.store.catalog import load_catalog, registered_schemas
from p2panda_assets.store.ingest import ingest
from p2panda_assets.store.logs import LOG_COLUMNS
from p2panda_assets.store.pipeline_state import PipelineState, pipeline_state
from p2panda_assets.store.registry import register
from p2panda_assets.store.staging import drop_tables, stage_table
from p2panda_assets.testing.builder import CorpusBuilder, create_field, instances
from p2panda_assets.tuning import PipelineTuning, tuned, tuning
from tests.pipeline.test_pipeline_matches_engine import empty_store

pytestmark = [pytest.mark.spark, pytest.mark.postgres]


def a_corpus_with_every_kind_of_log() -> tuple[CorpusBuilder, set[str]]:
    """A registered schema with instances in several logs (a delete among them), a log
    with a gap (its entries after it held), and a log of a schema nobody registered (its
    entries pending)."""
    corpus = CorpusBuilder()
    note = corpus.author(1).schema(1, "note")
    note.migrate(create_field("title", "text", default=""))
    note.migrate(create_field("body", "text", default=""))
    other = corpus.author(1).schema(2, "other")
    other.migrate(create_field("n", "integer", default=0))
    mary = instances(corpus.author(2), 1)
    first = mary.create(note.ref(), title="first", body="a")
    mary.update(note.ref(), first, title="first, again")
    second = mary.create(note.ref(), title="second")
    mary.delete(second, note.ref())
    gappy = instances(corpus.author(3), 1)
    gappy.create(note.ref(), title="kept")
    before_gap = len(corpus.pairs)
    gappy.create(note.ref(), title="lost")
    gappy.create(note.ref(), title="held")
    gappy.create(note.ref(), title="held too")
    del corpus.pairs[before_gap]  # the log's second entry never arrives
    instances(corpus.author(4), 1).create(other.ref(), n=7)
    return corpus, {note.schema_id}


@dataclass
class Store:
    conn: psycopg.Connection
    url: str
    warehouse: Warehouse
    state: PipelineState
    entries: int


@pytest.fixture(scope="module")
def store(spark: SparkSession, session_database: str) -> Iterator[Store]:
    corpus, registered = a_corpus_with_every_kind_of_log()
    with empty_store(session_database) as conn:
        ingest(conn, corpus.pairs)
        for schema_id in registered:
            register(conn, *parse_schema_id(schema_id), None)
        entries = verify_new_entries(spark, conn, session_database)
        warehouse = current_warehouse(spark, conn)
        yield Store(conn, session_database, warehouse, pipeline_state(conn), entries)


def as_rows(frame: DataFrame | pa.Table) -> list[Row]:
    """A frame of either path as rows, in one order, by their columns (u64 decimals as
    ints)."""
    table = frame.toArrow() if isinstance(frame, DataFrame) else frame
    rows = (row for batch in table.to_batches() for row in python_rows(batch))
    return sorted(rows, key=lambda row: repr(sorted(row.items())))


def account_rows(accounts: DataFrame | pa.Table) -> list[tuple[Any, ...]]:
    """Accounts as (hash, schema_id, state, reason, message, origin) tuples."""
    columns = ("hash", "schema_id", "state", "reason", "message", "origin")
    return sorted((tuple(row[c] for c in columns) for row in as_rows(accounts)), key=repr)


@dataclass
class Walk:
    """Every handle one path gave back, step by step, as
    `pipeline.index.sequence.IndexSteps.index` asks for them."""

    steps: IndexSteps[Any]
    verified: Any
    rows: list[Row] | None
    chained: Any
    found: dict[LogKey, bool]
    catalog: Catalog
    planned: Any
    totals: PlanTotals
    accepted: Any
    pending: Any
    accounts: Any
    run: str


def walk(steps: IndexSteps, store: Store, spark_jobs: bool) -> Walk:
    verified = steps.verified(store.state)
    rows = steps.rows(verified, store.entries)
    chained = steps.chain(verified, None if spark_jobs else rows, {})
    found = steps.schema_logs(chained, set())
    schema_keys = sorted(key for key, is_schema in found.items() if is_schema)
    catalog = load_catalog(store.conn, schema_keys, registered_schemas(store.conn))
    order = catalog.order()
    planned = steps.plan(chained, [], catalog, order)
    totals = steps.totals(planned)
    accepted = steps.accepted(verified, chained, totals.held)
    pending = steps.pending(accepted, planned, totals.waiting)
    accounts = steps.accounts(chained, pending, schema_account_rows(catalog))
    run = steps.write(accepted, planned, totals, False)
    handles = (chained, found, catalog, planned, totals, accepted, pending, accounts, run)
    return Walk(steps, verified, rows, *handles)


@pytest.fixture(scope="module")
def walks(spark: SparkSession, store: Store) -> dict[str, Walk]:
    spark_steps = SparkIndexSteps(spark, store.warehouse)
    driver_steps = DriverIndexSteps(store.warehouse)
    with tuned(in_tasks()):
        in_spark_tasks = walk(SparkIndexSteps(spark, store.warehouse), store, spark_jobs=True)
    return {
        "spark": walk(spark_steps, store, spark_jobs=True),
        "spark tasks": in_spark_tasks,
        "driver": walk(driver_steps, store, spark_jobs=False),
    }


# The Spark path: the logs planned in Spark's driver (a few), or in tasks with their plans
# shuffled to the entries, not broadcast (`in_tasks`: what a store of many logs does).
SPARK = ("spark", "spark tasks")


def in_tasks() -> PipelineTuning:
    return replace(tuning(), collect_plan_logs=0, broadcast_keys=0)


def test_the_corpus_has_what_the_contract_needs(walks: dict[str, Walk]) -> None:
    """Held entries, pending logs, a schema account and a deleted instance: no method is
    compared on nothing."""
    assert walks["driver"].totals.held == 2  # the two entries after the gap
    assert walks["driver"].totals.waiting  # the unregistered schema's log
    assert walks["driver"].found  # the schema logs
    # the logs planned in Spark's driver, and in tasks (persisted for the later steps)
    assert not walks["spark"].planned.is_cached and walks["spark tasks"].planned.is_cached
    assert walks["driver"].pending
    assert any(row["kind"] == "delete" for row in as_rows(walks["driver"].accepted))


def test_verified_entries_are_the_same(walks: dict[str, Walk]) -> None:
    for path in SPARK:
        assert as_rows(walks[path].verified) == as_rows(walks["driver"].verified)


def test_the_rows_to_chain_are_the_same(walks: dict[str, Walk]) -> None:
    spark_rows, driver_rows = walks["spark"].rows, walks["driver"].rows
    assert spark_rows is not None and driver_rows is not None  # a few entries: both hold them
    assert sorted(spark_rows, key=repr) == sorted(driver_rows, key=repr)


def test_chaining_finds_the_same_logs(walks: dict[str, Walk]) -> None:
    for path in SPARK:
        assert walks[path].found == walks["driver"].found
        assert as_rows(walks[path].chained) == as_rows(walks["driver"].chained)


def test_the_logs_are_planned_the_same(walks: dict[str, Walk]) -> None:
    for path in SPARK:
        assert as_rows(walks[path].planned) == as_rows(walks["driver"].planned)
        assert walks[path].totals == walks["driver"].totals


def test_the_accepted_entries_are_the_same(walks: dict[str, Walk]) -> None:
    for path in SPARK:
        assert as_rows(walks[path].accepted) == as_rows(walks["driver"].accepted)


def test_the_pending_accounts_are_the_same(walks: dict[str, Walk]) -> None:
    for path in SPARK:
        assert account_rows(walks[path].pending) == account_rows(walks["driver"].pending)


def test_the_index_accounts_are_the_same(walks: dict[str, Walk]) -> None:
    for path in SPARK:
        assert account_rows(walks[path].accounts) == account_rows(walks["driver"].accounts)


def test_the_written_layers_hold_the_same_messages(
    spark: SparkSession, store: Store, walks: dict[str, Walk]
) -> None:
    written = {
        path: read_layers(spark, [store.warehouse.chained(w.run)]) for path, w in walks.items()
    }
    for path in SPARK:
        assert as_rows(written[path]) == as_rows(written["driver"])
    assert as_rows(written["driver"])


def test_the_accounts_are_copied_the_same(
    spark: SparkSession, store: Store, walks: dict[str, Walk]
) -> None:
    copied = {}
    for path, steps in (
        ("spark", SparkIndexSteps(spark, store.warehouse)),
        ("spark tasks", SparkIndexSteps(spark, store.warehouse)),
        ("driver", DriverIndexSteps(store.warehouse)),
    ):
        stage = stage_table(store.conn, "accounts", f"contract_{path.replace(' ', '_')}")
        try:
            steps.copy_accounts(walks[path].accounts, store.url, stage)
            columns = "hash, schema_id, state, reason, message, origin"
            query = f"SELECT {columns} FROM p2panda.{stage.name}"
            copied[path] = sorted(store.conn.execute(query).fetchall(), key=repr)
        finally:
            drop_tables(store.conn, [stage])
    assert copied["spark"] == copied["spark tasks"] == copied["driver"]
    assert copied["driver"]


def test_the_logs_rows_are_copied_the_same(
    spark: SparkSession, store: Store, walks: dict[str, Walk]
) -> None:
    copied = {}
    for path, steps in (
        ("spark", walks["spark"].steps),  # the plans it made in the driver
        ("spark tasks", SparkIndexSteps(spark, store.warehouse)),
        ("driver", DriverIndexSteps(store.warehouse)),
    ):
        stage = stage_table(store.conn, "logs", f"contract_{path.replace(' ', '_')}")
        try:
            steps.copy_logs(walks[path].planned, store.url, stage)
            query = f"SELECT {', '.join(LOG_COLUMNS)} FROM p2panda.{stage.name}"
            copied[path] = sorted(store.conn.execute(query).fetchall(), key=repr)
        finally:
            drop_tables(store.conn, [stage])
    assert copied["spark"] == copied["spark tasks"] == copied["driver"]
    assert len(copied["driver"]) == walks["driver"].totals.logs


def test_logs_planned_with_what_was_kept_are_the_same(
    spark: SparkSession, store: Store, walks: dict[str, Walk]
) -> None:
    """An append's plan: the logs rows kept of the authors it touches join the chained
    logs; a kept log whose plan differs is `changed`, a kept log not chained again is
    planned but not `touched`, and a tip that did not move did not `grow`."""
    planned = sorted(as_rows(walks["driver"].planned), key=lambda r: repr(r["log_id"]))
    kept: list[Row] = [{"row_type": STORED, **{c: r[c] for c in LOG_COLUMNS}} for r in planned]
    kept[0]["why_message"] = "decided otherwise before"
    paths: dict[str, IndexSteps[Any]] = {
        "spark": SparkIndexSteps(spark, store.warehouse),
        "driver": DriverIndexSteps(store.warehouse),
    }
    catalog = walks["driver"].catalog
    again = {
        path: steps.plan(walks[path].chained, kept, catalog, catalog.order())
        for path, steps in paths.items()
    }
    with tuned(in_tasks()):
        steps = SparkIndexSteps(spark, store.warehouse)
        again["spark tasks"] = steps.plan(walks["spark"].chained, kept, catalog, catalog.order())
    for path in SPARK:
        assert as_rows(again[path]) == as_rows(again["driver"])
    totals = DriverIndexSteps(store.warehouse).totals(again["driver"])
    assert totals.changed and not totals.grew  # every tip as it was kept
    assert totals.logs == walks["driver"].totals.logs


def test_the_accepted_entry_at_a_position_is_the_same(
    spark: SparkSession, store: Store, walks: dict[str, Walk]
) -> None:
    layers = [store.warehouse.chained(walks["driver"].run)]
    positions: list[tuple[bytes, int, int]] = [
        (bytes(row["author"]), int(row["log_id"]), int(row["seq"]))
        for row in as_rows(walks["driver"].accepted)
    ]
    positions.append((b"\x00" * 32, 1, 1))  # no entry there
    spark_found = SparkIndexSteps(spark, store.warehouse).accepted_at(layers, positions)
    driver_found = DriverIndexSteps(store.warehouse).accepted_at(layers, positions)
    assert sorted(spark_found) == sorted(driver_found)
    assert len(driver_found) == len(positions) - 1


def test_merged_layers_hold_the_same_messages(
    spark: SparkSession, store: Store, walks: dict[str, Walk]
) -> None:
    layers = [store.warehouse.chained(w.run) for w in walks.values()]
    merged = {
        "spark": SparkIndexSteps(spark, store.warehouse).merge(layers),
        "driver": DriverIndexSteps(store.warehouse).merge(layers),
    }
    read = {
        path: read_layers(spark, [store.warehouse.chained(run)]) for path, run in merged.items()
    }
    assert as_rows(read["spark"]) == as_rows(read["driver"])
    both = read_layers(spark, layers)
    assert both is not None and as_rows(read["driver"]) == as_rows(both)
