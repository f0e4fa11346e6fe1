"""The columnar store: where entries go after their one verification, and where the
chained (decoded) messages of each run are kept for the reduction and the checks.

Its root is `P2PANDA_WAREHOUSE` (default `$P2PANDA_HOME/warehouse`): any URI Spark's
Hadoop file systems take (`file://`, `s3a://`, `hdfs://`), so that the hosts of a
cluster share it. Under the root, each database has a directory of its own (its
`warehouse_token`, kept in `p2panda.pipeline_state`), so two stores never read each
other's files:

    <root>/<token>/entries/batch=<n>/   every entry once: verdict, and for good ones the
                                        raw entry, payload and message index (append-only)
    <root>/<token>/compacted/<run>/     the batches up to one of them, rewritten as one
                                        (`pipeline.index.verify.compact_verified`)
    <root>/<token>/chained/<run>/schema=<id>/  the accepted entries of each log, decoded,
                                        by the schema its log is assigned to (per run)
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import SparkSession

from p2panda_assets.home import p2panda_home
from p2panda_assets.tuning import ENVIRONMENT, tuning

WAREHOUSE_ENV = ENVIRONMENT["warehouse"]
NO_SCHEMA = "-"  # the chained partition of logs that belong to no schema (yet)
SCHEMA_DIR = "schema="  # a layer's directory of one schema's messages: schema=<id>


def warehouse_root() -> str:
    """The configured root, without a trailing slash."""
    configured = tuning().warehouse
    root = configured or str(p2panda_home().resolve() / "warehouse")
    return root.rstrip("/")


@dataclass(frozen=True, slots=True)
class Warehouse:
    """The directories of one database's columnar store."""

    root: str
    token: str

    @property
    def base(self) -> str:
        return f"{self.root}/{self.token}"

    @property
    def entries(self) -> str:
        return f"{self.base}/entries"

    def batch(self, number: int) -> str:
        return f"{self.entries}/batch={number}"

    @property
    def compacted_root(self) -> str:
        return f"{self.base}/compacted"

    def compacted(self, run: str) -> str:
        return f"{self.compacted_root}/{run}"

    @property
    def chained_root(self) -> str:
        return f"{self.base}/chained"

    def chained(self, run: str) -> str:
        return f"{self.chained_root}/{run}"

    def chained_schema(self, run: str, schema_id: str) -> str:
        return f"{self.chained(run)}/{SCHEMA_DIR}{schema_id}"


def _filesystem(spark: SparkSession, path: str):
    jvm = spark.sparkContext._jvm
    assert jvm is not None  # a classic (non-Connect) session always has its JVM gateway
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    hadoop_path = jvm.org.apache.hadoop.fs.Path(path)
    return hadoop_path.getFileSystem(conf), hadoop_path


def exists(spark: SparkSession, path: str) -> bool:
    fs, hadoop_path = _filesystem(spark, path)
    return bool(fs.exists(hadoop_path))


def remove(spark: SparkSession, path: str) -> None:
    """Delete `path` and what is under it, if it exists."""
    fs, hadoop_path = _filesystem(spark, path)
    if fs.exists(hadoop_path):
        fs.delete(hadoop_path, True)


def children(spark: SparkSession, path: str) -> list[str]:
    """The names directly under `path` (none if it does not exist)."""
    fs, hadoop_path = _filesystem(spark, path)
    if not fs.exists(hadoop_path):
        return []
    return [status.getPath().getName() for status in fs.listStatus(hadoop_path)]
