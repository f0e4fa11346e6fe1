"""Spark partitions into PostgreSQL by binary COPY (`store.copying`), from the executors.

Each row travels as a pickled tuple of engine values, so that psycopg's binary dumpers
write every value as the engine made it (`store.copying` says why not Spark's JDBC writer).

A frame to copy has the columns `dest` (a key of `targets`) and `row` (the pickle), and
those its tally and its derived rows read (`copy_partitions`). One partition writes its
rows destination by destination over one connection; a COPY that fails fails only its
destination, and the result says which, so one schema's bad row never stops the others.
Its rows are written once, however often Spark runs its task (`once_per_task`).
"""

from __future__ import annotations

import json
import pickle
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import psycopg
import pyarrow as pa
from pyspark.sql import DataFrame

from p2panda_assets.pipeline.kernels.batches import Columns, arrow_schema
from p2panda_assets.pipeline.postgres.once_per_task import (
    batch_bytes,
    batch_of,
    job_ledger,
    task_transaction,
)
from p2panda_assets.pipeline.spark.session import sized_for_the_driver
from p2panda_assets.store.copying import Target, copy_rows
from p2panda_assets.store.staging import Stage
from p2panda_assets.tuning import tuning

# The columns of p2panda.accounts every stage of the pipeline writes (origin aside).
ACCOUNT_COLUMNS = (
    ("hash", "bytea"),
    ("schema_id", "text"),
    ("state", "text"),
    ("reason", "text"),
    ("message", "text"),
)
# The columns of p2panda.deleted_instances.
DELETED_COLUMNS = (("schema_id", "text"), ("instance_id", "bytea"))
RESULT_SPARK = "dest string, rows long, error string, tally string"
RESULT_ARROW = arrow_schema(
    [("dest", pa.string()), ("rows", pa.int64()), ("error", pa.string()), ("tally", pa.string())]
)
COUNT_ARROW = arrow_schema([("rows", pa.int64())])


@dataclass(frozen=True, slots=True)
class CopyResult:
    rows: dict[str, int]  # destination -> rows written
    errors: dict[str, str]  # destination -> the first error met
    tallies: dict[str, dict[str, int]]  # destination -> value -> rows whose tally holds it


@dataclass(frozen=True, slots=True)
class Derived:
    """Rows for one more target, made in the workers from each batch of the frame
    (`rows_of`: module-level, so the workers import it rather than unpickle it)."""

    target: Target
    rows_of: Callable[[Columns], Iterable[Sequence[object]]]


# A partition's rows wait in its worker until `flush_rows` (50,000), or `flush_bytes` (16
# MiB) of table rows, are there, then each destination's go in one COPY. A batch (2,000
# rows) of a partition holds rows of most schemas, and a COPY costs ~0.4 ms however few its
# rows (20 COPYs of 100 accounts against one of 2,000, into a local server): a COPY per
# destination and batch was thousands of them at 1M entries.


def flush_thresholds() -> tuple[int, int]:
    """(rows, bytes) a writer gathers before it copies: the driver's, passed to workers."""
    settings = tuning()
    return settings.flush_rows, settings.flush_bytes


def copy_partitions(
    frame: DataFrame,
    url: str,
    targets: dict[str, Target],
    tally: str | None = None,
    derived: Sequence[Derived] = (),
) -> CopyResult:
    """Write every (dest, row) of `frame` into its target, from the partitions; a row
    with no `dest` is there for `derived` alone. Every column of `frame` crosses to the
    Python workers: it should hold those the call reads, no more. With `tally`, a column of string
    lists: how many rows of each destination hold each value. Each of `derived` makes
    rows of each batch for its target; a failure there fails the call. All in the same
    scan of the frame: each more is another Spark job, and another read of what it
    reads. Rows are gathered over batches and written a destination at a time
    (`PipelineTuning.flush_rows`, `PipelineTuning.flush_bytes`)."""
    with job_ledger(url) as ledger:
        # The thresholds as the driver has them now: the workers get them with the call.
        write = partial(
            copy_batches,
            url=url,
            targets=targets,
            tally=tally,
            derived=derived,
            ledger=ledger,
            thresholds=flush_thresholds(),
        )
        results = frame.mapInArrow(write, RESULT_SPARK).collect()
    return copy_result(results)


def copy_locally(
    batches: Iterable[pa.RecordBatch],
    url: str,
    targets: dict[str, Target],
    tally: str | None = None,
    derived: Sequence[Derived] = (),
) -> CopyResult:
    """`copy_partitions` of Arrow batches the driver holds (the driver path): the same
    writer, over one connection, in one transaction, without a ledger (nothing retries
    the driver)."""
    results = copy_batches(iter(batches), url, targets, tally, derived, None, flush_thresholds())
    return copy_result(row for batch in results for row in batch.to_pylist())


def copy_batches(
    batches: Iterator[pa.RecordBatch],
    url: str,
    targets: dict[str, Target],
    tally: str | None,
    derived: Sequence[Derived],
    ledger: Stage | None,
    thresholds: tuple[int, int],
) -> Iterator[pa.RecordBatch]:
    """The writer of one partition's batches (`copy_partitions`): one result batch of
    rows written, the first error and the tally, by destination. `thresholds`: the rows
    and bytes of table rows gathered before they are written."""
    flush_rows, flush_bytes = thresholds
    written: dict[str, int] = {}
    errors: dict[str, str] = {}
    tallies: dict[str, Counter[str]] = {}
    waiting: dict[str, list[bytes]] = {}  # dest -> pickled rows
    more_waiting: list[list[Sequence[object]]] = [[] for _ in derived]
    # One transaction for the task, once (`task_transaction`): whichever attempt of it
    # Spark runs, its rows are written once. Each COPY in a savepoint of it: one
    # destination fails alone.
    with (
        psycopg.connect(url, autocommit=True) as conn,
        task_transaction(conn, ledger) as attempt,
    ):
        if attempt.recorded is not None:
            deque(batches, maxlen=0)  # its input read all the same, as by any task
            yield batch_of(attempt.recorded, RESULT_ARROW)
            return

        def flush() -> None:
            for dest, pickled in sorted(waiting.items()):
                if dest in errors:
                    continue
                rows = map(pickle.loads, pickled)
                try:
                    with conn.transaction():
                        copied = copy_rows(conn, targets[dest], rows)
                    written[dest] = written.get(dest, 0) + copied
                except Exception as error:  # one destination fails, not the partition
                    errors[dest] = f"{type(error).__name__}: {error}".strip()
            waiting.clear()
            for more, rows_of_more in zip(derived, more_waiting, strict=True):
                copy_rows(conn, more.target, rows_of_more)
                rows_of_more.clear()

        count = size = 0
        for batch in batches:
            columns = batch.to_pydict()
            if tally is not None:
                for dest, values in zip(columns["dest"], columns[tally], strict=True):
                    if dest is not None:
                        tallies.setdefault(dest, Counter()).update(values or ())
            for dest, row in zip(columns["dest"], columns["row"], strict=True):
                if dest is not None and dest not in errors:
                    waiting.setdefault(dest, []).append(row)
                    count += 1
                    size += len(row)
            for more, rows_of_more in zip(derived, more_waiting, strict=True):
                before = len(rows_of_more)
                rows_of_more.extend(more.rows_of(columns))
                count += len(rows_of_more) - before
            if count >= flush_rows or size >= flush_bytes:
                flush()
                count = size = 0
        flush()
        dests = sorted(written.keys() | errors.keys() | tallies.keys())
        result = pa.RecordBatch.from_pydict(
            {
                "dest": dests,
                "rows": [written.get(d, 0) for d in dests],
                "error": [errors.get(d) for d in dests],
                "tally": [json.dumps(tallies.get(d, {})) for d in dests],
            },
            schema=RESULT_ARROW,
        )
        attempt.result = batch_bytes(result)
    yield result


def copy_result(results: Iterable[Any]) -> CopyResult:
    """The partitions' result rows (`RESULT_ARROW`: Spark rows, or dicts) summed by
    destination."""
    rows: dict[str, int] = {}
    errors: dict[str, str] = {}
    tallies: dict[str, dict[str, int]] = {}
    for result in results:
        dest = result["dest"]
        rows[dest] = rows.get(dest, 0) + result["rows"]
        if result["error"] is not None:
            errors.setdefault(dest, result["error"])
        counts = tallies.setdefault(dest, {})
        for value, count in json.loads(result["tally"]).items():
            counts[value] = counts.get(value, 0) + count
    return CopyResult(rows, errors, tallies)


def copy_frame(frame: DataFrame, url: str, target: Target) -> int:
    """Write the columns `target.columns` of `frame` into `target`; how many rows. A
    failure fails the call (the caller drops what it staged).

    From the partitions, or, in a step sized for a small store (`sized_for_the_driver`),
    from the driver: the frame's Arrow batches are collected and written by the same
    code over one connection. That saves a task per partition and a connection per task,
    ~0.4 s a frame (2 cores); the frames copied here are narrow (accounts, deleted sets),
    a few hundred bytes a row at most."""
    columns = list(target.columns)

    def write(batches: Iterable[pa.RecordBatch], ledger: Stage | None) -> Iterator[int]:
        written = 0
        # Once a task, as in `copy_partitions`.
        with (
            psycopg.connect(url, autocommit=True) as conn,
            task_transaction(conn, ledger) as attempt,
        ):
            if attempt.recorded is not None:
                deque(batches, maxlen=0)
                yield int(attempt.recorded)
                return
            for batch in batches:
                data = batch.to_pydict()
                rows = zip(*(data[c] for c in columns), strict=True)
                written += copy_rows(conn, target, rows)
            attempt.result = str(written).encode()
        yield written

    def write_task(batches: Iterator[pa.RecordBatch], ledger: Stage) -> Iterator[pa.RecordBatch]:
        for written in write(batches, ledger):
            yield pa.RecordBatch.from_pydict({"rows": [written]}, schema=COUNT_ARROW)

    selected = frame.select(*columns)
    if sized_for_the_driver(frame.sparkSession):
        return sum(write(selected.toArrow().to_batches(), None))
    with job_ledger(url) as ledger:
        results = selected.mapInArrow(partial(write_task, ledger=ledger), "rows long").collect()
    return sum(result["rows"] for result in results)
