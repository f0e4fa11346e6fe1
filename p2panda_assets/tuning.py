"""Every knob of the pipeline in one frozen object, read from the environment in one place.

`PipelineTuning.from_environment()` reads each `P2PANDA_*` setting (and `SPARK_MASTER`)
and nothing else does; the thresholds that have no setting (when a step collects rows to
Spark's driver, when it broadcasts, how often layers are folded together) are its fields
too, with the default each was measured to. The code asks `tuning()`: the tuning a caller
put in force with `tuned(...)`, else the environment's. A test builds the object it wants
(`dataclasses.replace(tuning(), max_layers=2)`) and runs under `tuned`, instead of
patching a module's globals. An index step and a materialization each hold the tuning in
force when they started to their end. docs/operations.md has the table of the settings.

The Python workers Spark starts do not see `tuned`: what they need travels with the call
(`postgres.copy.copy_partitions` passes its flush thresholds).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, fields
from functools import lru_cache

from p2panda_assets.errors import P2pandaError, Reason


@dataclass(frozen=True, slots=True)
class PipelineTuning:
    """The pipeline's knobs. Those `ENVIRONMENT` names are read from their variables; the
    others are constants a test may change. Sizes count entries or messages."""

    # Spark: where it runs, with what.
    spark_master: str = "local[*]"
    jdbc_jar: str = "/usr/share/java/postgresql.jar"
    driver_memory: str = ""  # empty: 256m per local core, at least 512m
    spark_java_options: str = ""  # more options for the driver's JVM, after the product's
    class_archive: str = ""  # the driver's class archive: a path, "off", or empty: the default
    driver_host: str = ""  # where executors reach the driver; empty: found
    driver_bind: str = ""  # where the driver listens; empty: found
    # Spark: how work is split.
    shuffle_partitions: int = 0  # 0: two per core
    entries_per_partition: int = 250_000
    # The columnar store.
    warehouse: str = ""  # empty: $P2PANDA_HOME/warehouse
    append_min_entries: int = 100_000  # below this, an index step chains the whole store
    max_layers: int = 12  # chained layers kept before an index step merges the newest
    compact_batches: int = 64  # verified batches kept before they are compacted
    layer_group_rows: int = 8_192  # messages a row group of a chained layer's files
    key_index_messages: int = 20_000  # a chained layer of fewer gets no key index
    # The driver path (pyarrow, no Spark job) and rows collected to Spark's driver.
    driver_path_entries: int = 100_000  # -1: never
    driver_path_messages: int = 20_000  # -1: never
    verify_in_driver: int = 2_000  # new entries the driver verifies without a Spark job
    collect_chain_entries: int = 20_000  # entries to chain collected to Spark's driver
    collect_plan_logs: int = 50_000  # chained logs planned in Spark's driver
    collect_cascade_rows: int = 200_000  # relation rows whose cascades settle collected
    # Spark's joins.
    literal_keys: int = 2_000  # keys a filter names as literals
    broadcast_keys: int = 200_000  # keys (or deleted rows) a join broadcasts
    broadcast_held: int = 200_000  # held hashes a join broadcasts
    # Binary COPY: rows wait in a worker until this many, or this many bytes.
    flush_rows: int = 50_000
    flush_bytes: int = 16 * 2**20
    # Timeouts, in seconds (0 or less: off).
    no_executor_timeout: float = 180.0
    stall_timeout: float = 900.0
    lock_wait_seconds: float = 600.0
    lock_progress_seconds: float = 15.0

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> PipelineTuning:
        """The tuning the environment (`os.environ` if not given) sets."""
        source = os.environ if environ is None else environ
        return _parsed(tuple(source.get(env, "").strip() for env in ENVIRONMENT.values()))


# Each knob read from the environment, and its variable (docs/operations.md lists them).
ENVIRONMENT = {
    "spark_master": "SPARK_MASTER",
    "jdbc_jar": "P2PANDA_JDBC_JAR",
    "driver_memory": "P2PANDA_DRIVER_MEMORY",
    "spark_java_options": "P2PANDA_SPARK_JAVA_OPTIONS",
    "class_archive": "P2PANDA_CLASS_ARCHIVE",
    "driver_host": "P2PANDA_SPARK_DRIVER_HOST",
    "driver_bind": "P2PANDA_SPARK_DRIVER_BIND",
    "shuffle_partitions": "P2PANDA_SHUFFLE_PARTITIONS",
    "entries_per_partition": "P2PANDA_ENTRIES_PER_PARTITION",
    "warehouse": "P2PANDA_WAREHOUSE",
    "append_min_entries": "P2PANDA_APPEND_MIN_ENTRIES",
    "driver_path_entries": "P2PANDA_DRIVER_PATH_ENTRIES",
    "driver_path_messages": "P2PANDA_DRIVER_PATH_MESSAGES",
    "no_executor_timeout": "P2PANDA_SPARK_NO_EXECUTOR_TIMEOUT",
    "stall_timeout": "P2PANDA_SPARK_STALL_TIMEOUT",
    "lock_wait_seconds": "P2PANDA_LOCK_WAIT_SECONDS",
    "lock_progress_seconds": "P2PANDA_LOCK_PROGRESS_SECONDS",
}


@lru_cache(maxsize=16)
def _parsed(values: tuple[str, ...]) -> PipelineTuning:
    """The tuning of these variables' values (in `ENVIRONMENT`'s order); an unset or empty
    one keeps its default. Cached: the same environment is read once."""
    kinds = {f.name: type(getattr(DEFAULTS, f.name)) for f in fields(PipelineTuning)}
    given: dict[str, object] = {}
    for (name, env), value in zip(ENVIRONMENT.items(), values, strict=True):
        if not value:
            continue
        kind = kinds[name]
        try:
            given[name] = kind(value)
        except ValueError:
            what = "a whole number" if kind is int else "a number"
            raise P2pandaError(Reason.BAD_INPUT, f"{env}={value!r} is not {what}") from None
    return PipelineTuning(**given)  # type: ignore[arg-type]


DEFAULTS = PipelineTuning()
_IN_FORCE: ContextVar[PipelineTuning | None] = ContextVar("p2panda_tuning", default=None)


def tuning() -> PipelineTuning:
    """The tuning in force: the one `tuned` put there, else the environment's."""
    return _IN_FORCE.get() or PipelineTuning.from_environment()


@contextmanager
def tuned(chosen: PipelineTuning) -> Iterator[PipelineTuning]:
    """Run the block (in this thread or task) under `chosen`."""
    token = _IN_FORCE.set(chosen)
    try:
        yield chosen
    finally:
        _IN_FORCE.reset(token)
