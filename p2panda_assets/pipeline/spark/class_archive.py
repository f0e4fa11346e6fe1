"""A class-data archive (the JVM's AppCDS) of the Spark driver's classes, so that a new
driver JVM maps them instead of loading and verifying ~18,000 classes again.

Every `panda materialize`, `panda demo`, resident worker and test session starts a cold
JVM. On 2 cores (`bench/cold_start.py --samples 2`, pairs in one run), a session's start
with its Python workers and one job took 13.8 s with the archive against 20.0 s without
(0.69), and `panda demo` 80.5 s against 87.8 s (0.92). `scripts/setup` builds it once per
installation (`python -m p2panda_assets.pipeline.spark.class_archive`); without it, Spark
starts as before.

The JVM checks an archive before it maps it (its own build, the garbage collector, the
class path's jars) and ignores one that does not match, silently: its warning is turned
off, since the driver's output is the product's. A *truncated* archive crashes the JVM,
so one is written under a temporary name and renamed into place only once the JVM that
wrote it has exited and a new one has mapped it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pyarrow as pa
from pyspark import SparkContext
from pyspark.sql import SparkSession, Window
from pyspark.sql import functions as F

# Where the archive is and the options that map it live in `spark` (the driver's options
# need them); this module builds it with `spark`'s session: the import runs one way.
from p2panda_assets.pipeline.spark.session import (
    ARCHIVE_DIR,
    ARCHIVE_ENV,
    JAVA_OPTIONS_ENV,
    OFF,  # noqa: F401 (named here too: tests and bench/cold_start.py import it from here)
    QUIET,
    archive_path,
    build_session,
    driver_java_options,
    java_binary,  # noqa: F401 (named here too, for tests/pipeline/test_class_archive.py)
    spark_config,
    warm_up,
)

DUMP_TIMEOUT = 600  # seconds for the JVM to write the archive as it exits
ONE_JOB = (
    "from p2panda_assets.pipeline.spark.session import build_session\n"
    "assert build_session().range(3).count() == 3"
)


def build_archive(path: Path) -> bool:
    """Run the Spark work the pipeline does in a driver JVM that writes its loaded
    classes to `path` as it exits; whether `path` now holds an archive. The session is
    this process's first and last: the JVM must exit for the archive to be written.
    It is published only if a new driver maps it (`maps`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    config = spark_config("local[2]")
    # Quiet: the dump warns of each class it leaves out (signed jars, generated ones).
    dump = f"-XX:ArchiveClassesAtExit={partial} {QUIET}"
    config["spark.driver.extraJavaOptions"] = f"{driver_java_options(archive=False)} {dump}"
    spark = build_session(config)
    try:
        with tempfile.TemporaryDirectory() as scratch:
            exercise(spark, Path(scratch))
    finally:
        stop_jvm(spark)
    if not partial.is_file() or not maps(partial):
        partial.unlink(missing_ok=True)
        return False
    partial.replace(path)
    return True


def maps(archive: Path) -> bool:
    """Whether a new driver JVM maps `archive` and runs a job: `-Xshare:on` makes a
    mismatch fatal rather than ignored. (A dump cut short, say on a full disk, would
    crash every JVM that mapped it.) In a scratch directory: a crashing JVM leaves its
    hs_err file there."""
    env = {**os.environ, ARCHIVE_ENV: str(archive), JAVA_OPTIONS_ENV: "-Xshare:on"}
    with tempfile.TemporaryDirectory() as scratch:
        result = subprocess.run(
            [sys.executable, "-c", ONE_JOB],
            env=env,
            cwd=scratch,
            capture_output=True,
            timeout=DUMP_TIMEOUT,
        )
    return result.returncode == 0


def stop_jvm(spark: SparkSession) -> None:
    """Stop the session and wait for its JVM to exit (it writes the archive then): its
    launcher exits on the end of its standard input."""
    gateway = SparkContext._gateway
    spark.stop()
    if gateway is None:
        return
    gateway.shutdown()
    process = gateway.proc  # set by pyspark's launch_gateway
    process.stdin.close()
    process.wait(timeout=DUMP_TIMEOUT)
    SparkContext._gateway = None
    SparkContext._jvm = None


def exercise(spark: SparkSession, scratch: Path) -> None:
    """What a run does, on a few rows: Python workers over Arrow, frames from Arrow,
    partitioned Parquet written and read, grouping, windows, joins, sorts, collects."""
    warm_up(spark)
    rows = pa.table(
        {
            "schema": ["a", "a", "b", "c"],
            "seq": pa.array([1, 2, 1, 3], pa.int64()),
            "payload": [b"x", b"y", None, b"z"],
            "tags": [["t"], [], None, ["u", "v"]],
        }
    )
    frame = spark.createDataFrame(rows.to_pandas())
    frame.write.mode("overwrite").partitionBy("schema").parquet(str(scratch / "rows"))
    stored = spark.read.parquet(str(scratch / "rows"))
    newest = F.row_number().over(Window.partitionBy("schema").orderBy(F.desc("seq")))
    latest = stored.withColumn("rank", newest).where(F.col("rank") == 1)
    counts = stored.groupBy("schema").agg(F.count(F.lit(1)).alias("n"), F.max("seq"))
    joined = latest.join(counts, "schema", "left").orderBy("schema")
    joined.collect()
    joined.toArrow()
    joined.toPandas()
    stored.select(F.explode_outer("tags"), F.length("payload")).distinct().count()


def main() -> int:
    """Build this installation's archive unless it is there (`scripts/setup` runs it)."""
    path = archive_path()
    if path is None:
        print("class archive: off (no Java, or P2PANDA_CLASS_ARCHIVE=off)")
        return 0
    if path.is_file():
        print(f"class archive: {path}")
        return 0
    if " " in str(path):
        print(f"class archive: none, Spark would split its path at the space: {path}")
        return 0
    if build_archive(path):
        print(f"class archive: built {path}")
        # Those of a Java or Spark replaced since (not in a directory P2PANDA_CLASS_ARCHIVE names).
        if path.parent == ARCHIVE_DIR:
            for older in ARCHIVE_DIR.glob("spark-*.jsa"):
                if older != path:
                    older.unlink()
    else:
        print("class archive: the JVM wrote none; Spark starts without one", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
