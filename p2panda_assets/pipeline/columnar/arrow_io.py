"""The columnar store read and written in the driver, with pyarrow: the driver path
(`pipeline.index.paths`, `pipeline.build.paths`), which an index step takes for at most
`driver_path_entries()` entries to chain, and an increment for at most
`driver_path_messages()` new messages (its scan of their schemas' messages streams:
`scan_batches`). The same files Spark reads and writes (`pipeline.columnar.layers`,
`pipeline.index.verify`), through `pyarrow.fs`: a local path or `file://`, `s3a://` as S3,
`hdfs://`. A root pyarrow cannot open (no credentials, no libhdfs) raises
`LocalReadUnavailable`, and the caller takes the Spark path."""

from __future__ import annotations

import functools
import logging
import secrets
from collections.abc import Iterator, Sequence

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyspark.sql.pandas.types import to_arrow_schema

from p2panda_assets.pipeline.columnar.layers import DECODED_SPARK, LAYER_SPARK
from p2panda_assets.tuning import ENVIRONMENT, tuning

log = logging.getLogger(__name__)

# A layer as pyarrow reads it: the columns Spark imposes (`LAYER_SPARK`), `schema` from the
# `schema=` directories (hive partitioning: schema ids are hex digits and dashes, which
# Spark does not escape).
LAYER_ARROW = to_arrow_schema(LAYER_SPARK)
SCHEMA_PARTITIONING = ds.partitioning(pa.schema([("schema", pa.string())]), flavor="hive")


# The driver path's bounds (bench/driver_path.py and bench/pipeline.py, docs/live-path.md).
# Entries: the most an index step chains in the driver, and the most rows a blocking check
# reads there; at 100k, a whole run of 100k entries took 14.7 s against 17.8 s in Spark.
# Messages: the most new messages an increment reduces in the driver (on a store of 1M,
# 10 in 1.2 s against 3.7 s, 20,000 in 6.1 s against 8.8 s), whatever its schemas hold:
# their messages are streamed. -1 turns either off.
DRIVER_PATH_ENVS = (ENVIRONMENT["driver_path_entries"], ENVIRONMENT["driver_path_messages"])


def driver_path_entries() -> int:
    """Most entries (messages) a driver-path step reads (`P2PANDA_DRIVER_PATH_ENTRIES`)."""
    return tuning().driver_path_entries


def driver_path_messages() -> int:
    """Most new messages an increment reduces in the driver (`P2PANDA_DRIVER_PATH_MESSAGES`)."""
    return tuning().driver_path_messages


class LocalReadUnavailable(Exception):
    """The driver cannot open the warehouse's root with pyarrow."""


def layer_filesystem(root: str) -> tuple[pafs.FileSystem, str]:
    """The pyarrow file system of a layer's root, and the root's path in it."""
    uri = "s3://" + root.removeprefix("s3a://") if root.startswith("s3a://") else root
    try:
        return pafs.FileSystem.from_uri(uri)
    except (OSError, ValueError, pa.ArrowException) as error:
        raise LocalReadUnavailable(f"{root}: {error}".splitlines()[0]) from error


def readable(root: str) -> bool:
    """Whether pyarrow can open the warehouse root `root`; if not, the log says why, once."""
    try:
        layer_filesystem(root)
    except LocalReadUnavailable as unavailable:
        say_once(str(unavailable))
        return False
    return True


def parquet_dataset(
    path: str, schema: pa.Schema, partitioning: ds.Partitioning | None = None
) -> ds.Dataset:
    """The Parquet files under the directory `path` (any URI `layer_filesystem` opens),
    read with `schema` imposed."""
    filesystem, directory = layer_filesystem(path)
    return ds.dataset(
        directory,
        schema=schema,
        format="parquet",
        filesystem=filesystem,
        partitioning=partitioning,
    )


def layers_dataset(layers: Sequence[str]) -> ds.Dataset | None:
    """The messages of the chained `layers` (their root directories) as one dataset with
    `LAYER_ARROW`'s columns, `schema` included (None for no layer)."""
    parts = [parquet_dataset(root, LAYER_ARROW, SCHEMA_PARTITIONING) for root in layers]
    if not parts:
        return None
    return ds.dataset(parts)  # a list of datasets is their union


DECODED_ARROW = to_arrow_schema(DECODED_SPARK)


def kinds_counted(paths: Sequence[str]) -> dict[str | None, tuple[int, int]]:
    """The messages in one schema's directories of some layers (`layers.decoded_paths`),
    counted by kind (None: undecodable), each with how many carry an `error`: what the
    `decoded_messages` asset reports, read from two narrow columns, once a layer."""
    counted: dict[str | None, tuple[int, int]] = {}
    for path in paths:
        for kind, n, e in layer_kinds(path):
            n0, e0 = counted.get(kind, (0, 0))
            counted[kind] = (n0 + n, e0 + e)
    return counted


@functools.lru_cache(maxsize=4096)
def layer_kinds(path: str) -> tuple[tuple[str | None, int, int], ...]:
    """(kind, messages, errors) of one schema's directory of a committed layer. Read once
    a process: a committed layer's files never change (each index step and each merge
    writes a layer of its own, under a name never used again, and old ones are only
    removed), so a live run reads its new layer's counts alone, not every message of
    the schema again (the 1M store: 0.08 s a run, all its layers read)."""
    table = parquet_dataset(path, DECODED_ARROW).to_table(columns=["kind", "error"])
    by_kind = table.group_by("kind").aggregate([([], "count_all"), ("error", "count")])
    return tuple((r["kind"], r["count_all"], r["error_count"]) for r in by_kind.to_pylist())


def write_batch(table: pa.Table, path: str) -> None:
    """A verified batch (`verify.VERIFIED_ARROW`) into its directory, one Parquet file,
    where Spark and `pipeline.index.driver_path.read_verified_locally` read it."""
    filesystem, directory = layer_filesystem(path)
    filesystem.create_dir(directory, recursive=True)
    pq.write_table(
        table, f"{directory}/part-00000-{secrets.token_hex(6)}.parquet", filesystem=filesystem
    )


# How far a driver-path scan reads ahead: a batch, a file. pyarrow decodes every row of
# a batch before the filter drops most, and its defaults (16 batches, 4 files) held
# ~0.5 GB of decoded messages at once in a scan of the 1M store's messages (bench's
# store: all 20 schemas' messages marked for 400 instances, 0.45-0.94 s and 800 MiB of
# RSS at its peak, against 0.30-0.36 s and 425 MiB a batch at a time).
READ_AHEAD = 1


def scan(dataset: ds.Dataset, columns: list[str], filter: ds.Expression) -> pa.Table:
    """The rows of `dataset` that `filter` keeps, of `columns`, read a batch at a time."""
    return _scanner(dataset, columns, filter).to_table()


def scan_batches(
    dataset: ds.Dataset, columns: list[str], filter: ds.Expression
) -> Iterator[pa.Table]:
    """`scan`, a batch at a time (none empty): a caller that keeps a few rows of each
    holds no more than a batch of the rest."""
    for batch in _scanner(dataset, columns, filter).to_batches():
        if batch.num_rows:
            yield pa.Table.from_batches([batch])


def _scanner(dataset: ds.Dataset, columns: list[str], filter: ds.Expression) -> ds.Scanner:
    return dataset.scanner(
        columns=columns,
        filter=filter,
        batch_readahead=READ_AHEAD,
        fragment_readahead=READ_AHEAD,
    )


_said: set[str] = set()


def say_once(reason: str) -> None:
    """Log, once a process, why a run took the Spark path though it was small."""
    if reason not in _said:
        _said.add(reason)
        log.warning("the driver path cannot read the warehouse (%s): Spark's it is", reason)
