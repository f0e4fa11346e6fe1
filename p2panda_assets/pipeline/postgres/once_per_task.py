"""A Spark task's writes to PostgreSQL, committed once whatever Spark retries.

Spark runs a task again when an attempt fails, also one that failed after its rows were
committed (its executor lost before the driver had its result): on a cluster, up to
four attempts. A task writes in one transaction that also claims the task in the job's
ledger (`store.task_ledger`) and records its result there; an attempt that finds the
task recorded writes nothing and gives the recorded result.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import psycopg
import pyarrow as pa
from pyspark import TaskContext

from p2panda_assets.failpoints import Failpoint, failpoint
from p2panda_assets.store.staging import Stage
from p2panda_assets.store.task_ledger import claim_task, create_ledger, drop_ledger, record_task


@dataclass(slots=True)
class Attempt:
    """One attempt of a task, in its transaction."""

    recorded: bytes | None  # the result of the attempt that committed: write nothing
    result: bytes = b""  # this attempt's result, to record (set before the transaction ends)


@contextmanager
def job_ledger(url: str) -> Iterator[Stage]:
    """A ledger for the tasks of one Spark job, dropped after it."""
    with psycopg.connect(url, autocommit=True) as conn:
        ledger = create_ledger(conn)
        try:
            yield ledger
        finally:
            drop_ledger(conn, ledger)


@contextmanager
def task_transaction(conn: psycopg.Connection, ledger: Stage | None) -> Iterator[Attempt]:
    """The one transaction of a task's writes on `conn` (autocommit), which claims the
    task (its partition) in `ledger` and records `Attempt.result` there. Without a
    ledger (rows the driver writes: nothing retries them), a plain transaction."""
    context = TaskContext.get() if ledger is not None else None
    with conn.transaction():
        if ledger is None or context is None:
            yield Attempt(None)
            return
        task = context.partitionId()
        attempt = Attempt(claim_task(conn, ledger, task))
        yield attempt
        if attempt.recorded is None:
            record_task(conn, ledger, task, attempt.result)
    if context.attemptNumber() == 0:
        failpoint(Failpoint.TASK_COMMITTED)


def batch_bytes(batch: pa.RecordBatch) -> bytes:
    """A result batch as the ledger records it (Arrow IPC)."""
    return batch.serialize().to_pybytes()


def batch_of(data: bytes, schema: pa.Schema) -> pa.RecordBatch:
    return pa.ipc.read_record_batch(pa.py_buffer(data), schema)
