"""The columnar store's reads that every run makes. Chained layers read in two scans at
most: the same rows, each with the schema of its directory, as reading each layer with
Spark's partition discovery gives; a filter on the schema reads only that schema's files. New
verified batches read from their directories alone: the rows the whole store filtered
on the batch number gives."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from p2panda_assets.pipeline.columnar.layers import DECODED_COLUMNS, read_layers, read_schema_layers
from p2panda_assets.pipeline.columnar.warehouse import NO_SCHEMA, WAREHOUSE_ENV, Warehouse, children
from p2panda_assets.pipeline.index.verify import (
    VERIFIED_READ,
    compact_verified,
    current_warehouse,
    read_new_verified,
    read_verified,
)
from p2panda_assets.store.pipeline_state import pipeline_state
from p2panda_assets.testing.warehouse import write_layer, write_rejected_batch
from tests.pipeline.test_pipeline_matches_engine import empty_store

pytestmark = [pytest.mark.spark]

SCHEMAS = ("ab" * 33 + "-1", "cd" * 33 + "-12", NO_SCHEMA)


def layer(spark: SparkSession, root: Path, number: int) -> str:
    path = str(root / f"run{number}")
    write_layer(spark, path, number, SCHEMAS, (1, 2))
    return path


def rows_of(frame: DataFrame) -> list[tuple]:
    return sorted(tuple(row) for row in frame.select(*DECODED_COLUMNS, "schema").collect())


def files_scanned(frame: DataFrame) -> list[int]:
    """The files each scan of the executed plan read (their `numFiles` metrics)."""
    plan = frame._jdf.queryExecution().executedPlan()
    scans = []

    def walk(node) -> None:
        if node.nodeName().startswith("Scan"):
            scans.append(int(node.metrics().apply("numFiles").value()))
        children = node.children()
        for i in range(children.size()):
            walk(children.apply(i))

    walk(plan)
    return scans


def read_root(spark: SparkSession, warehouse: Warehouse) -> DataFrame:
    """Every batch under the entries' root, by Spark's partition discovery."""
    return spark.read.schema(VERIFIED_READ).parquet(warehouse.entries)


def test_layers_read_together_equal_each_layer_read_alone(
    spark: SparkSession, tmp_path: Path
) -> None:
    layers = [layer(spark, tmp_path, n) for n in (1, 2, 3)]
    discovered = [spark.read.parquet(path) for path in layers]
    expected = discovered[0].unionByName(discovered[1]).unionByName(discovered[2])

    read = read_layers(spark, layers)

    assert read is not None
    assert rows_of(read) == rows_of(expected)
    assert {row["schema"] for row in read.select("schema").collect()} == set(SCHEMAS)


def test_a_filter_on_the_schema_reads_only_its_files(spark: SparkSession, tmp_path: Path) -> None:
    layers = [layer(spark, tmp_path, n) for n in (1, 2, 3)]
    read = read_layers(spark, layers)
    assert read is not None

    one = read.filter(F.col("schema").isin(SCHEMAS[1]))
    rows = one.collect()

    assert {row["schema"] for row in rows} == {SCHEMAS[1]}
    assert len(rows) == 6  # three layers, two seqs
    # Of nine files (one a schema and layer): the first layer's scan, then the later two's.
    assert files_scanned(one) == [1, 2]


def test_one_schemas_directories_read_in_one_scan(spark: SparkSession, tmp_path: Path) -> None:
    layers = [layer(spark, tmp_path, n) for n in (1, 2)]
    paths = [f"{layer}/schema={SCHEMAS[0]}" for layer in layers]

    read = read_schema_layers(spark, paths)

    assert read is not None
    assert read.columns == list(DECODED_COLUMNS)
    expected = read_layers(spark, layers)
    assert expected is not None
    wanted = expected.filter(F.col("schema") == SCHEMAS[0]).drop("schema")
    assert sorted(map(tuple, read.collect())) == sorted(map(tuple, wanted.collect()))
    assert read_schema_layers(spark, []) is None
    assert read_layers(spark, []) is None


def test_new_batches_read_alone_equal_the_store_filtered(
    spark: SparkSession, tmp_path: Path
) -> None:
    warehouse = Warehouse(str(tmp_path), "token")
    for number in (1, 2, 3, 4, 5):
        write_rejected_batch(warehouse, number, 2)

    new = read_new_verified(spark, warehouse, 2, 4)  # batch 5 is not committed yet

    everything = read_root(spark, warehouse)
    wanted = everything.filter((F.col("batch") > 2) & (F.col("batch") <= 4))
    assert new.columns == everything.columns
    assert sorted(map(tuple, new.collect())) == sorted(map(tuple, wanted.collect()))
    assert sorted(row["batch"] for row in new.collect()) == [3, 3, 4, 4]


def test_no_new_batch_reads_no_row(spark: SparkSession, tmp_path: Path) -> None:
    warehouse = Warehouse(str(tmp_path), "token")
    write_rejected_batch(warehouse, 1, 2)

    new = read_new_verified(spark, warehouse, 1, 1)

    assert new.collect() == []
    assert new.schema == spark.createDataFrame([], VERIFIED_READ).schema


def batches_verified(conn, warehouse: Warehouse, first: int, last: int) -> None:
    """Batches `first`..`last` in the columnar store, committed as verification does."""
    for number in range(first, last + 1):
        write_rejected_batch(warehouse, number, 2)
    conn.execute("UPDATE p2panda.pipeline_state SET batch = %s", (last,))


@pytest.fixture
def store(session_database: str, tmp_path: Path, monkeypatch, tune) -> Iterator[tuple]:
    """An empty entry store, and its columnar store's directories (under `tmp_path`),
    whose verified batches are compacted once more than one is outside the compacted."""
    monkeypatch.setenv(WAREHOUSE_ENV, str(tmp_path))
    tune(compact_batches=1)
    with empty_store(session_database) as conn:
        yield conn, Warehouse(str(tmp_path), pipeline_state(conn).warehouse_token)


@pytest.mark.postgres
def test_compacted_batches_read_as_every_batch_did(spark: SparkSession, store: tuple, tune) -> None:
    tune(compact_batches=3)
    conn, warehouse = store
    batches_verified(conn, warehouse, 1, 3)
    assert (
        compact_verified(spark, conn, warehouse, pipeline_state(conn)).compacted_run is None
    )  # 3, not more
    batches_verified(conn, warehouse, 4, 5)
    before = sorted(map(tuple, read_root(spark, warehouse).collect()))

    state = compact_verified(spark, conn, warehouse, pipeline_state(conn))

    assert (state.compacted_through, state.batch) == (5, 5)
    assert children(spark, warehouse.entries) == []
    assert children(spark, warehouse.compacted_root) == [state.compacted_run]
    assert sorted(map(tuple, read_verified(spark, warehouse, state).collect())) == before
    assert read_new_verified(spark, warehouse, 5, 5).collect() == []
    # The store's files are all there: verification does not start over.
    assert current_warehouse(spark, conn) == warehouse
    assert pipeline_state(conn) == state

    batches_verified(conn, warehouse, 6, 6)
    state = pipeline_state(conn)
    now = sorted(map(tuple, read_verified(spark, warehouse, state).collect()))
    assert now == sorted(before + list(map(tuple, read_root(spark, warehouse).collect())))
    batches = sorted(row["batch"] for row in read_verified(spark, warehouse, state).collect())
    assert batches == [n for n in range(1, 7) for _ in range(2)]  # two entries a batch


@pytest.mark.postgres
def test_a_compaction_replaces_the_last_and_what_a_dead_one_left(
    spark: SparkSession, store: tuple
) -> None:
    conn, warehouse = store
    batches_verified(conn, warehouse, 1, 2)
    first = compact_verified(spark, conn, warehouse, pipeline_state(conn))
    dead = Path(warehouse.compacted("dead"))  # written, never committed
    dead.mkdir()
    write_rejected_batch(Warehouse(str(dead), "x"), 9, 2)
    batches_verified(conn, warehouse, 3, 4)

    second = compact_verified(spark, conn, warehouse, pipeline_state(conn))

    assert second.compacted_run != first.compacted_run
    assert children(spark, warehouse.compacted_root) == [second.compacted_run]
    rows = read_verified(spark, warehouse, second).collect()
    assert sorted(row["batch"] for row in rows) == [1, 1, 2, 2, 3, 3, 4, 4]


@pytest.mark.postgres
def test_a_missing_compacted_directory_starts_verification_over(
    spark: SparkSession, store: tuple
) -> None:
    conn, warehouse = store
    batches_verified(conn, warehouse, 1, 2)
    state = compact_verified(spark, conn, warehouse, pipeline_state(conn))
    assert state.compacted_run is not None
    batches_verified(conn, warehouse, 3, 3)
    assert current_warehouse(spark, conn) == warehouse
    shutil.rmtree(warehouse.compacted(state.compacted_run))

    again = current_warehouse(spark, conn)

    assert again != warehouse
    assert pipeline_state(conn).compacted_run is None
