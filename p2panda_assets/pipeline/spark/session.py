"""Spark configuration: one place, used by the Dagster resource and by tests.

`SPARK_MASTER` defaults to `local[*]`; `spark://host:port` runs on a standalone cluster.
Workers must run this project's Python (they import the engine), and Spark reads and
writes PostgreSQL through Debian's JDBC driver jar (there is no Maven here).
"""

from __future__ import annotations

import hashlib
import importlib
import os
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyspark
from pyspark.sql import SparkSession

from p2panda_assets.pipeline.kernels.batches import warm_casts
from p2panda_assets.pipeline.spark.driver_address import driver_address_settings, is_local
from p2panda_assets.tuning import ENVIRONMENT, tuning


def jdbc_jar() -> Path:
    """The PostgreSQL JDBC driver's jar Spark loads (`P2PANDA_JDBC_JAR`)."""
    return Path(tuning().jdbc_jar)


def spark_master() -> str:
    return tuning().spark_master


# Shuffle partitions per core, for a store large enough to keep every core busy, unless
# P2PANDA_SHUFFLE_PARTITIONS says how many. On 2 cores, 2 per core against 4
# (bench/pipeline.py, the same day): 32.3 s against 35.6 s at 100k; 152.5 s against
# 152.1-154.1 s at 1M, and its increment 22.5 s against 24.9-25.0 s. Every partition is
# a task, and a run is many small jobs.
PARTITIONS_PER_CORE = 2


def parallel_partitions(cores: int | None = None) -> int:
    """Partitions that keep `cores` busy (the session's, else this host's): the count a
    mid-size store shuffles into; P2PANDA_SHUFFLE_PARTITIONS, if set."""
    given = tuning().shuffle_partitions
    return given if given > 0 else PARTITIONS_PER_CORE * (cores or os.cpu_count() or 1)


# A store of fewer verified entries than this per partition shuffles into fewer partitions.
ENTRIES_PER_SHUFFLE_PARTITION = 10_000

# No shuffle partition of a step holds more verified entries than this (the rows of a log
# stay together, so a partition holds its share of whole logs). A task sorts, groups and
# persists its partition, and the heap holds per task what grows with it: the bound is
# what keeps a store of any size in the heap that 1M entries fit (docs/scale.md).
ENTRIES_PER_PARTITION_ENV = ENVIRONMENT["entries_per_partition"]


def entries_per_partition() -> int:
    """The most verified entries one shuffle partition is sized for
    (`PipelineTuning.entries_per_partition`, 250,000, or P2PANDA_ENTRIES_PER_PARTITION)."""
    return max(1, tuning().entries_per_partition)


def shuffle_partitions_for(entries: int, cores: int | None = None) -> int:
    """Partitions of every shuffle of a run on a store of `entries` verified entries, on
    `cores` cores: enough that none holds more than `entries_per_partition()`, and for a
    store below that, one per `ENTRIES_PER_SHUFFLE_PARTITION` up to `parallel_partitions`.

    The second rule keeps a small store in few tasks: each partition is a task with a
    Python worker round trip, and on a small store (the sensors' usual run) eight of them
    cost more than the data (bench/latency.py: a run of one new entry 5.0 s with 8, 3.0 s
    with 1). Spark's adaptive coalescing does not merge them (the grouped and persisted
    frames keep their partitioning). The first grows the count with the store: a fixed
    count made each partition grow instead, until one task's rows outgrew the heap (5M
    entries in 4 partitions)."""
    spread = min(parallel_partitions(cores), -(-entries // ENTRIES_PER_SHUFFLE_PARTITION))
    bounded = -(-entries // entries_per_partition())
    return max(1, spread, bounded)


# The session setting that says how many verified entries the running step is sized for
# (unset outside `sized_for_the_store`).
SIZED_FOR_KEY = "spark.p2panda.sizedForEntries"

# A store of at most this many verified entries is small: its steps shuffle into one
# partition, plan without adaptive query execution, and write their narrow frames
# (accounts, deleted sets) from the driver (`copy.copy_frame`).
SMALL_STORE_ENTRIES = ENTRIES_PER_SHUFFLE_PARTITION


def step_settings(entries: int, cores: int | None = None) -> dict[str, str]:
    """The session settings of a step on a store of `entries` verified entries, on
    `cores` cores (the session's; this host's if not given).

    Adaptive query execution re-plans a query at each shuffle and broadcast, stage by
    stage: what it gains (coalesced partitions, joins turned to broadcasts, split skew)
    is nothing on a small store, whose shuffles have one partition, and it costs each
    of a run's dozen queries time in the driver. Off for a small store: twelve runs of a
    growing 123-entry store, each way in a new process, took 91.2 and 88.9 s against
    100.7 and 102.1 s with it; in one warmed session (`bench/small_runs.py --pairs 2`)
    47.7 and 60.9 s against 61.3 and 60.8 s (2 cores, pairs in turn)."""
    settings = {
        "spark.sql.shuffle.partitions": str(shuffle_partitions_for(entries, cores)),
        SIZED_FOR_KEY: str(entries),
    }
    if entries <= SMALL_STORE_ENTRIES:
        settings["spark.sql.adaptive.enabled"] = "false"
    return settings


@contextmanager
def sized_for_the_store(spark: SparkSession, entries: int) -> Iterator[None]:
    """Run the block with the `step_settings` for `entries` (settings of the session,
    put back after: the resident worker's session outlives the run). Sized for the
    session's cores: on a cluster, its executors', not the driver host's."""
    settings = step_settings(entries, spark.sparkContext.defaultParallelism)
    before = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, was in before.items():
            if was is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, was)


def sized_for_the_driver(spark: SparkSession) -> bool:
    """Whether the running step is sized for a small store (`SMALL_STORE_ENTRIES`)."""
    entries = spark.conf.get(SIZED_FOR_KEY, None)
    return entries is not None and int(entries) <= SMALL_STORE_ENTRIES


# The heap of the JVM that runs the driver and, on `local[*]`, the executors. 512m holds a
# million entries as fast as 1g (bench/pipeline.py at 1M: 154.1 s against 151.9-154.1 s),
# and with partitions of at most `entries_per_partition()` five million too (docs/scale.md):
# what is large is persisted to disk, not cached, and sorts spill. The JVM's resident size
# is about the heap plus 0.6 GiB (metaspace, code, threads, direct buffers). A local master
# runs a task per core in that heap: it grows with the cores, not with the store.
DRIVER_MEMORY = "512m"
DRIVER_MEMORY_ENV = ENVIRONMENT["driver_memory"]
HEAP_MIB_PER_LOCAL_CORE = 256


def local_cores(master: str) -> int:
    """The cores a local master runs tasks on in the driver's JVM (`local`, `local[N]`,
    `local[*]`, `local[N,F]`); 0 for a cluster's master, whose tasks run elsewhere."""
    if not is_local(master):
        return 0
    if master == "local":
        return 1
    given = master[len("local[") :].split(",")[0].rstrip("]")
    return (os.cpu_count() or 1) if given == "*" else int(given)


def driver_memory(master: str) -> str:
    """The driver's heap: P2PANDA_DRIVER_MEMORY, else `HEAP_MIB_PER_LOCAL_CORE` for each
    core a local master runs tasks on, never less than `DRIVER_MEMORY` (512m on 2 cores,
    2g on 8; the rule docs/operations.md states)."""
    given = tuning().driver_memory
    if given:
        return given
    return f"{max(512, HEAP_MIB_PER_LOCAL_CORE * local_cores(master))}m"


ARROW_BATCH_BYTES = 64 * 2**20

# More options for the driver JVM (on `local[*]` it runs the executors too), after the
# product's own. JAVA_TOOL_OPTIONS would do it too, but the JVM then announces it on
# stderr, which is the product's own. deploy/README.md measures one such option.
JAVA_OPTIONS_ENV = ENVIRONMENT["spark_java_options"]


def spark_config(master: str | None = None) -> dict[str, Any]:
    """The settings every session of the product uses."""
    return {
        "spark.master": master or spark_master(),
        "spark.app.name": "p2panda-assets",
        "spark.jars": str(jdbc_jar()),
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": str(parallel_partitions()),
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        # Rows per Arrow batch between the JVM and the Python workers: a payload may be
        # 1 MiB, and the default of 10,000 rows would let one batch reach gigabytes.
        "spark.sql.execution.arrow.maxRecordsPerBatch": "2000",
        # ... and at most this many bytes: Arrow batches are built outside the heap, in
        # direct memory, which the JVM caps at the heap's size by default.
        "spark.sql.execution.arrow.maxBytesPerBatch": str(ARROW_BATCH_BYTES),
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.memory": driver_memory(master or spark_master()),
        "spark.executorEnv.PYSPARK_PYTHON": sys.executable,
        "spark.pyspark.python": sys.executable,
        "spark.driver.extraJavaOptions": driver_java_options(),
        "spark.executor.extraJavaOptions": "-Duser.timezone=UTC",
        # Where executors on other hosts reach the driver (`driver_address`).
        **driver_address_settings(master or spark_master()),
    }


# A `panda materialize` of a store up to a few hundred thousand entries starts a JVM for
# a few runs: C2 compiles more of Spark than those runs gain from (its threads share the
# cores with the executors). C1 alone, there: 46.5-53.0 s against 54.2-62.2 s for a cold
# `panda materialize` of 123 entries in 3 schemas (2 cores; three pairs in turn, ratios
# 0.81-0.95, C1 forced off by `-XX:TieredStopAtLevel=4` in P2PANDA_SPARK_JAVA_OPTIONS);
# one run of bench/pipeline.py in a fresh session (P2PANDA_SPARK_JAVA_OPTIONS set, two
# pairs in turn) 17.4 and 17.4 s against 20.6 and 20.5 s at 100,000 entries, 40.0 and
# 39.8 s against 40.9 and 41.2 s at 300,000. A session that lives for many runs (the
# resident worker, tests) or a large store keeps both compilers: C1 alone made later runs
# of a warm session ~30 % slower, and 1M entries 22 % slower (deploy/README.md).
SHORT_RUN_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1"
SHORT_RUN_MAX_ENTRIES = 200_000


@contextmanager
def compiled_for_a_short_run(entries: int) -> Iterator[None]:
    """Around a command that starts its JVM for a few runs on a store of at most
    `entries` entries: C1 alone if the store is small (`SHORT_RUN_MAX_ENTRIES`), by
    P2PANDA_SPARK_JAVA_OPTIONS (put back after). The user's options there come after
    it, so they can say otherwise. The variable, not `tuned`: the JVM starts later, in
    whichever thread or process the run builds its session in."""
    given = os.environ.get(JAVA_OPTIONS_ENV)
    if entries <= SHORT_RUN_MAX_ENTRIES:
        os.environ[JAVA_OPTIONS_ENV] = f"{SHORT_RUN_JAVA_OPTIONS} {given or ''}".strip()
    try:
        yield
    finally:
        if given is None:
            os.environ.pop(JAVA_OPTIONS_ENV, None)
        else:
            os.environ[JAVA_OPTIONS_ENV] = given


# The driver's class-data archive (AppCDS): where it is and the options that map it.
# `class_archive` builds it (and says why); it imports this module, not the reverse.
ARCHIVE_ENV = ENVIRONMENT["class_archive"]  # a path, or "off"
OFF = "off"
# Unified logging of the class-data sharing tags: a mismatched archive is ignored quietly.
QUIET = "-Xlog:cds*=off"
ARCHIVE_DIR = Path(sys.prefix) / "var" / "p2panda-assets"  # the default's directory


def java_binary() -> Path | None:
    """The `java` Spark's launcher runs: `$JAVA_HOME/bin/java`, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    return Path(found).resolve() if found and Path(found).exists() else None


def archive_path() -> Path | None:
    """Where this installation's archive is (or would be): P2PANDA_CLASS_ARCHIVE, else
    under the Python environment, named by what it depends on (the JVM binary and the
    Spark jars), so that an upgrade of either names a new one. None: turned off, or no
    Java."""
    setting = tuning().class_archive
    if setting == OFF:
        return None
    if setting:
        return Path(setting)
    java = java_binary()
    if java is None:
        return None
    stat = java.stat()
    spark = Path(pyspark.__file__).resolve().parent
    identity = f"{java}:{stat.st_size}:{stat.st_mtime_ns}:{spark}:{pyspark.__version__}"
    key = hashlib.sha256(identity.encode()).hexdigest()[:16]
    return ARCHIVE_DIR / f"spark-{key}.jsa"


def archive_options() -> list[str]:
    """The driver JVM's options that map the archive, if there is one (Spark splits
    the options at spaces, so a path with one is not used)."""
    path = archive_path()
    if path is None or not path.is_file() or " " in str(path):
        return []
    return [f"-XX:SharedArchiveFile={path}", QUIET]


def driver_java_options(archive: bool = True) -> str:
    """The driver JVM's options: the product's, this installation's class archive (if
    `archive` and one is built: `archive_options`), then P2PANDA_SPARK_JAVA_OPTIONS."""
    # The driver logs errors only, on stderr: the package's log4j2.properties, named by
    # a file URI (no spaces for Spark to split the Java options at).
    log4j2 = (Path(__file__).resolve().parents[2] / "log4j2.properties").as_uri()
    options = [
        # Timestamps cross JDBC as wall-clock values of the JVM's zone: make it UTC.
        "-Duser.timezone=UTC",
        # The parallel collector: a smaller footprint than G1's per-region bookkeeping.
        "-XX:+UseParallelGC",
        f"-Dlog4j2.configurationFile={log4j2}",
        *(archive_options() if archive else []),
        tuning().spark_java_options,
    ]
    return " ".join(option for option in options if option)


def use_this_python() -> None:
    """Spark starts Python workers with PYSPARK_PYTHON; it must be this interpreter."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


def build_session(config: dict[str, Any] | None = None) -> SparkSession:
    use_this_python()
    builder = SparkSession.builder
    for key, value in (config or spark_config()).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


# The modules whose functions the pipeline runs in Python workers.
WORKER_MODULES = (
    "p2panda_assets.pipeline.index.verify",
    "p2panda_assets.pipeline.index.step",
    "p2panda_assets.pipeline.build.reduction",
    "p2panda_assets.pipeline.postgres.copy",
)
WARM_UP_ARROW = pa.schema([("modules", pa.list_(pa.string()))])


def warm_up(spark: SparkSession) -> list[str]:
    """Start a Python worker per core, each with the pipeline's modules imported, and the
    JVM's Arrow path to them. A session's first Python job costs ~1.5 s more than the
    next one (2 cores, after a JVM-only job; ~2.7 s without it); a process that keeps
    its session for many runs (the resident worker) pays it here, not in its first run.
    Spark stops a worker idle for a minute; the next job forks one again (~0.8 s).
    The workers and the driver also make their first Arrow casts here (`warm_casts`).
    Returns each worker's imported modules among `WORKER_MODULES`."""
    cores = spark.sparkContext.defaultParallelism
    warm_casts()  # the driver verifies a few new entries itself

    def start(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for name in WORKER_MODULES:
            importlib.import_module(name)
        warm_casts()
        for _ in batches:
            pass
        imported = [name for name in WORKER_MODULES if name in sys.modules]
        yield pa.RecordBatch.from_pydict({"modules": [imported]}, schema=WARM_UP_ARROW)

    rows = spark.range(cores, numPartitions=cores).mapInArrow(start, "modules array<string>")
    return [name for row in rows.collect() for name in row["modules"]]
