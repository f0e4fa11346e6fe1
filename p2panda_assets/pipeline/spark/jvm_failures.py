"""A Spark JVM that dies under a run, named for what it was and what to change.

Spark ends its JVM with exit code 52 when a task runs out of heap (`SparkExitCode.OOM`;
on `local[*]` the tasks share the driver's JVM). py4j then only says that its connection
was refused, and the run failed as `internal` with no hint of the heap. The exit code is
the precise signal: the run fails with `out-of-memory`, naming what grew: a task's
entries, or, on a store of many logs, the index step's state per log in the driver. The
tables stay as they were: a build swaps nothing before every stage is loaded, and its
stages are dropped by the database connection, which outlives the JVM.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from py4j.protocol import Py4JError, Py4JJavaError  # type: ignore[import-untyped]
from pyspark.sql import SparkSession

from p2panda_assets.errors import P2pandaError, Reason
from p2panda_assets.pipeline.spark.session import (
    DRIVER_MEMORY_ENV,
    ENTRIES_PER_PARTITION_ENV,
    driver_memory,
    entries_per_partition,
    spark_master,
)

log = logging.getLogger(__name__)

SPARK_OOM_EXIT = 52  # org.apache.spark.util.SparkExitCode.OOM
EXIT_WAIT_SECONDS = 15.0  # the JVM's shutdown hooks run before it exits (slower when loaded)


def jvm_exit_code(spark: SparkSession, wait: float = EXIT_WAIT_SECONDS) -> int | None:
    """The exit code of the JVM this process launched for `spark`, once it has exited
    (waiting up to `wait` seconds for it); None while it runs, or if another process
    launched it (a JVM this process did not start cannot be asked)."""
    gateway = spark.sparkContext._gateway
    proc = getattr(gateway, "proc", None)
    if proc is None:
        return None
    try:
        return int(proc.wait(timeout=wait))
    except Exception:  # still running: not a death of the JVM (subprocess.TimeoutExpired)
        return None


# What the index step holds in the driver's JVM for each log of the store when it chains
# them all (its plan, broadcast, ~0.7 KB, and its summary, collected, ~0.5 KB:
# docs/scale.md), and the share of the heap past which that, not a task, is what grew.
LOG_HEAP_BYTES = 1_200
LOGS_SHARE_OF_HEAP = 0.25


def out_of_memory_message(master: str, logs: int | None = None) -> str:
    """What ran out and what to change: the driver's per-log state when the store's
    `logs` take a large share of the heap (a store of many small logs), else a task's
    entries."""
    memory = driver_memory(master)
    heap = heap_bytes(memory)
    if logs is not None and logs * LOG_HEAP_BYTES > LOGS_SHARE_OF_HEAP * heap:
        held = logs * LOG_HEAP_BYTES
        wanted = -(-(heap + 3 * held) // 2**28) * 256  # MiB, rounded up to 256
        return (
            f"Spark's JVM ran out of heap ({DRIVER_MEMORY_ENV}={memory}) while the index "
            f"step held a plan and a summary of each of the store's {logs:,} logs in the "
            f"driver (~{held / 2**20:,.0f} MiB): set {DRIVER_MEMORY_ENV}={wanted}m or "
            "more; the tables are kept as they were"
        )
    return (
        f"Spark's JVM ran out of heap ({DRIVER_MEMORY_ENV}={memory}) with up "
        f"to {entries_per_partition():,} entries a partition: set {ENTRIES_PER_PARTITION_ENV} "
        f"lower (more, smaller tasks), or {DRIVER_MEMORY_ENV} higher; the tables are kept "
        "as they were"
    )


def heap_bytes(memory: str) -> int:
    """A JVM memory setting (`512m`, `2g`, `1024k`, bytes) in bytes."""
    units = {"k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
    text = memory.strip().lower().removesuffix("b")
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


# What a job still running says when the JVM's shutdown hook stops its SparkContext: a
# task ran out of heap, Spark is exiting with 52, and the job's caller hears this first.
CONTEXT_SHUT_DOWN = "SparkContext was shut down"


def ran_out_of_memory(spark: SparkSession, error: BaseException) -> bool:
    """Whether `error`, raised by a call into Spark, says its JVM ran out of heap: the
    JVM's own error names it, or the JVM is gone with Spark's exit code for it. A JVM
    that answered with another error is alive (its exit is not waited for), unless the
    error cannot be read or says the SparkContext was shut down: the JVM is exiting, and
    which of its errors reaches Python first is a race."""
    try:
        text = str(error)
    except Exception:  # a Py4JJavaError asks the JVM for its text, and the JVM is gone
        text = ""
    if "java.lang.OutOfMemoryError" in text:
        return True
    if isinstance(error, Py4JJavaError) and text and CONTEXT_SHUT_DOWN not in text:
        return False
    return jvm_exit_code(spark) == SPARK_OOM_EXIT


@contextmanager
def jvm_failures_explained(
    spark: SparkSession, logs: Callable[[], int] | None = None
) -> Iterator[None]:
    """Run the block; if Spark's JVM ran out of heap under it, raise `out-of-memory`
    instead of py4j's error. Any other failure passes unchanged. `logs`: how many logs
    the store holds, asked only after the heap ran out (the index step's driver state
    grows with them)."""
    try:
        yield
    except (Py4JError, ConnectionError) as error:
        if ran_out_of_memory(spark, error):
            # The JVM is exiting (Spark's handler ends it with 52): the run fails once it
            # is gone, so that nothing after it (the resident worker's next run) meets a
            # session half shut down. An error that names the heap comes before the exit.
            jvm_exit_code(spark)
            master = spark.sparkContext.master or spark_master()
            message = out_of_memory_message(master, None if logs is None else logs())
            raise P2pandaError(Reason.OUT_OF_MEMORY, message) from error
        raise


@contextmanager
def cleaned_up(*cleanups: Callable[[], object]) -> Iterator[None]:
    """Run the block, then each of `cleanups` (what a step persisted or broadcast). If
    the block failed, a cleanup that fails too is logged, and the block's error is the
    one raised: a JVM that died under the block fails every later call into it, and a
    cleanup's error (`unpersist` of a broadcast) hid an out-of-memory from
    `jvm_failures_explained`, which then could not name it."""
    try:
        yield
    except BaseException:
        for cleanup in cleanups:
            try:
                cleanup()
            except Exception as error:  # the block's error says what went wrong
                log.warning("a cleanup after a failed step failed too: %r", error)
        raise
    for cleanup in cleanups:
        cleanup()
