"""The columnar store read and written in the driver, with pyarrow: the driver path
(`index_paths`, `increment_paths`), which a step takes for at most
`driver_path_entries()` entries to chain or new messages to reduce. The same files Spark
reads and writes (`pipeline.layers`, `pipeline.verify`), through `pyarrow.fs`: a local
path or `file://`, `s3a://` as S3, `hdfs://`. A root pyarrow cannot open (no
credentials, no libhdfs) raises `LocalReadUnavailable`, and the caller takes the Spark
path."""

from __future__ import annotations

import logging
import os
import secrets
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyspark.sql.pandas.types import to_arrow_schema

from p2panda_assets.pipeline.layers import LAYER_SPARK

log = logging.getLogger(__name__)

# A layer as pyarrow reads it: the columns Spark imposes (`LAYER_SPARK`), `schema` from the
# `schema=` directories (hive partitioning: schema ids are hex digits and dashes, which
# Spark does not escape).
LAYER_ARROW = to_arrow_schema(LAYER_SPARK)
SCHEMA_PARTITIONING = ds.partitioning(pa.schema([("schema", pa.string())]), flavor="hive")


DRIVER_PATH_ENV = "P2PANDA_DRIVER_PATH_ENTRIES"
# Up to this many entries to chain, or new messages of an increment, a step takes the
# driver path (docs/live-path.md has the measurements behind the default).
DEFAULT_DRIVER_PATH_ENTRIES = 20_000


def driver_path_entries() -> int:
    """`P2PANDA_DRIVER_PATH_ENTRIES`, or its default; -1 turns the driver path off."""
    return int(os.environ.get(DRIVER_PATH_ENV) or DEFAULT_DRIVER_PATH_ENTRIES)


class LocalReadUnavailable(Exception):
    """The driver cannot open the warehouse's root with pyarrow."""


def layer_filesystem(root: str) -> tuple[pafs.FileSystem, str]:
    """The pyarrow file system of a layer's root, and the root's path in it."""
    uri = "s3://" + root.removeprefix("s3a://") if root.startswith("s3a://") else root
    try:
        return pafs.FileSystem.from_uri(uri)
    except (OSError, ValueError, pa.ArrowException) as error:
        raise LocalReadUnavailable(f"{root}: {error}".splitlines()[0]) from error


def layers_dataset(layers: Sequence[str]) -> ds.Dataset | None:
    """The messages of the chained `layers` (their root directories) as one dataset with
    `LAYER_ARROW`'s columns, `schema` included (None for no layer)."""
    parts = []
    for root in layers:
        filesystem, path = layer_filesystem(root)
        parts.append(
            ds.dataset(
                path,
                schema=LAYER_ARROW,
                format="parquet",
                filesystem=filesystem,
                partitioning=SCHEMA_PARTITIONING,
            )
        )
    if not parts:
        return None
    # A list of datasets is their union (pyarrow's docs); the stubs know lists of paths.
    return ds.dataset(parts)  # type: ignore[arg-type]


def write_batch(table: pa.Table, path: str) -> None:
    """A verified batch (`verify.VERIFIED_ARROW`) into its directory, one Parquet file,
    where Spark and `local_index.read_verified_locally` read it."""
    filesystem, directory = layer_filesystem(path)
    filesystem.create_dir(directory, recursive=True)
    pq.write_table(
        table, f"{directory}/part-00000-{secrets.token_hex(6)}.parquet", filesystem=filesystem
    )


_said: set[str] = set()


def say_once(reason: str) -> None:
    """Log, once a process, why a run took the Spark path though it was small."""
    if reason not in _said:
        _said.add(reason)
        log.warning("the driver path cannot read the warehouse (%s): Spark's it is", reason)
