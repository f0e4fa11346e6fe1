"""`copy_partitions` writes each destination's rows from the partitions, a failing
destination fails alone, and the tally and the derived rows it makes in the same scan
count and derive from every row."""

from __future__ import annotations

import pickle

import psycopg
import pytest
from pyspark.sql import SparkSession

from p2panda_assets.pipeline.kernels.batches import Columns
from p2panda_assets.pipeline.postgres.copy import Derived, copy_partitions
from p2panda_assets.store.copying import Target

pytestmark = [pytest.mark.spark, pytest.mark.postgres]


def test_rows_errors_and_tallies_by_destination(
    spark: SparkSession, conn: psycopg.Connection, database_url: str
) -> None:
    conn.execute("CREATE TABLE p2panda.copy_good (n bigint, label text)")
    conn.execute("CREATE TABLE p2panda.copy_bad (n bigint, label text)")
    targets = {
        "good": Target("p2panda", "copy_good", ("n", "label"), ("int8", "text")),
        "bad": Target("p2panda", "copy_bad", ("n", "label"), ("int8", "text")),
    }
    rows: list[tuple[str, bytes, list[str] | None]] = [
        ("good", pickle.dumps((n, f"é{n}")), ["a", "b"] if n % 3 else []) for n in range(60)
    ]
    # A value int8 cannot hold: every COPY of "bad" fails, in whichever partition.
    rows += [("bad", pickle.dumps((2**63, "x")), ["a"] if n % 2 else None) for n in range(10)]
    frame = spark.createDataFrame(rows, "dest string, row binary, fell_back array<string>")

    result = copy_partitions(frame.repartition(3), database_url, targets, tally="fell_back")

    assert result.rows["good"] == 60
    assert set(result.errors) == {"bad"}
    assert result.tallies == {"good": {"a": 40, "b": 40}, "bad": {"a": 5}}
    stored = conn.execute("SELECT n, label FROM p2panda.copy_good ORDER BY n").fetchall()
    assert stored == [(n, f"é{n}") for n in range(60)]
    assert conn.execute("SELECT count(*) FROM p2panda.copy_bad").fetchone() == (0,)


def test_a_frame_of_dest_and_row_alone_copies_with_empty_tallies(
    spark: SparkSession, conn: psycopg.Connection, database_url: str
) -> None:
    conn.execute("CREATE TABLE p2panda.copy_plain (n bigint)")
    frame = spark.createDataFrame([("plain", pickle.dumps((1,)))], "dest string, row binary")
    result = copy_partitions(
        frame, database_url, {"plain": Target("p2panda", "copy_plain", ("n",), ("int8",))}
    )
    assert result.rows == {"plain": 1}
    assert result.errors == {}
    assert result.tallies == {"plain": {}}


def test_derived_rows_go_to_their_targets_in_the_same_scan(
    spark: SparkSession, conn: psycopg.Connection, database_url: str
) -> None:
    conn.execute("CREATE TABLE p2panda.copy_rows (n bigint)")
    conn.execute("CREATE TABLE p2panda.copy_doubled (n bigint, twice bigint)")
    conn.execute("CREATE TABLE p2panda.copy_odd (n bigint)")
    targets = {"rows": Target("p2panda", "copy_rows", ("n",), ("int8",))}
    doubled_target = Target("p2panda", "copy_doubled", ("n", "twice"), ("int8", "int8"))
    odd_target = Target("p2panda", "copy_odd", ("n",), ("int8",))

    def doubled(columns: Columns) -> list[tuple[int, int]]:
        return [(n, 2 * n) for n in columns["n"]]

    def odd(columns: Columns) -> list[tuple[int]]:
        return [(n,) for n in columns["n"] if n % 2]

    # Every third row has no destination: it is there for the derived rows alone.
    rows = [("rows" if n % 3 else None, pickle.dumps((n,)), n) for n in range(30)]
    frame = spark.createDataFrame(rows, "dest string, row binary, n long")

    result = copy_partitions(
        frame.repartition(3),
        database_url,
        targets,
        derived=[Derived(doubled_target, doubled), Derived(odd_target, odd)],
    )

    assert result.rows == {"rows": 20}
    copied = conn.execute("SELECT n FROM p2panda.copy_rows ORDER BY n").fetchall()
    assert copied == [(n,) for n in range(30) if n % 3]
    twice = conn.execute("SELECT n, twice FROM p2panda.copy_doubled ORDER BY n").fetchall()
    assert twice == [(n, 2 * n) for n in range(30)]
    odds = conn.execute("SELECT n FROM p2panda.copy_odd ORDER BY n").fetchall()
    assert odds == [(n,) for n in range(30) if n % 2]


def test_rows_gathered_over_many_batches_are_all_written_and_a_late_failure_fails_alone(
    spark: SparkSession, conn: psycopg.Connection, database_url: str, tune
) -> None:
    """Batches of 4 rows, written every 7 rows or more: several flushes a partition."""
    tune(flush_rows=7)
    conn.execute("CREATE TABLE p2panda.copy_many (n bigint)")
    conn.execute("CREATE TABLE p2panda.copy_late (n bigint)")
    conn.execute("CREATE TABLE p2panda.copy_all (n bigint)")
    targets = {
        "many": Target("p2panda", "copy_many", ("n",), ("int8",)),
        "late": Target("p2panda", "copy_late", ("n",), ("int8",)),
    }
    every = Target("p2panda", "copy_all", ("n",), ("int8",))

    def all_rows(columns: Columns) -> list[tuple[int]]:
        return [(n,) for n in columns["n"]]

    # "late" holds int8 values until its last row, which int8 cannot hold.
    rows = [("many", pickle.dumps((n,)), n, ["t"]) for n in range(100)]
    rows += [("late", pickle.dumps((n,)), 100 + n, None) for n in range(20)]
    rows += [("late", pickle.dumps((2**63,)), 120, None)]
    frame = spark.createDataFrame(rows, "dest string, row binary, n long, tags array<string>")
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    batch_rows = spark.conf.get(key)
    spark.conf.set(key, "4")
    try:
        result = copy_partitions(
            frame.coalesce(1),
            database_url,
            targets,
            tally="tags",
            derived=[Derived(every, all_rows)],
        )
    finally:
        spark.conf.set(key, batch_rows)

    assert result.rows["many"] == 100
    assert set(result.errors) == {"late"}
    assert result.tallies == {"many": {"t": 100}, "late": {}}
    many = conn.execute("SELECT n FROM p2panda.copy_many ORDER BY n").fetchall()
    assert many == [(n,) for n in range(100)]
    every_n = conn.execute("SELECT n FROM p2panda.copy_all ORDER BY n").fetchall()
    assert every_n == [(n,) for n in range(121)]


def test_a_task_that_fails_after_writing_leaves_no_rows(
    spark: SparkSession, conn: psycopg.Connection, database_url: str, tune
) -> None:
    """A task's rows are one transaction: a task that fails after some of its rows were
    written (here its derived rows fail on its last batch) leaves none of them, so the
    attempt Spark retries on a cluster (`local[*]` does not retry) writes them once."""
    tune(flush_rows=7)
    conn.execute("CREATE TABLE p2panda.copy_undone (n bigint)")
    conn.execute("CREATE TABLE p2panda.copy_undone_all (n bigint)")
    targets = {"undone": Target("p2panda", "copy_undone", ("n",), ("int8",))}

    def rows_failing_at_the_end(columns: Columns) -> list[tuple[int]]:
        if 99 in columns["n"]:
            raise RuntimeError("the worker dies")
        return [(n,) for n in columns["n"]]

    rows = [("undone", pickle.dumps((n,)), n) for n in range(100)]
    frame = spark.createDataFrame(rows, "dest string, row binary, n long")
    every = Target("p2panda", "copy_undone_all", ("n",), ("int8",))
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    batch_rows = spark.conf.get(key)
    spark.conf.set(key, "4")
    try:
        with pytest.raises(Exception, match="the worker dies"):
            copy_partitions(
                frame.coalesce(1),
                database_url,
                targets,
                derived=[Derived(every, rows_failing_at_the_end)],
            )
    finally:
        spark.conf.set(key, batch_rows)

    assert conn.execute("SELECT count(*) FROM p2panda.copy_undone").fetchone() == (0,)
    assert conn.execute("SELECT count(*) FROM p2panda.copy_undone_all").fetchone() == (0,)
