"""Where each instance's messages are in a chained layer: its key index.

An increment reduces again every message that creates or names an instance its new
messages touch (`increments.touched_messages`). Found by a scan, that read every message
of the touched schemas: on the 1M store ~0.2 s on its own and ~0.4 s of a live run's
~2 s, growing with the store. A committed layer never changes, so its keys can be listed
once: a layer of `PipelineTuning.key_index_messages` (20,000) messages or more gets a
Parquet file, _keys.parquet (`INDEX_FILE`), of (tag, file, row group) sorted by tag,
where tag is 64 bits of a message's `MESSAGE_KEY` (`key_tags`), a row per keyed
message. A read of some keys' messages reads the index's row groups whose tag range
holds one of theirs, then only the row groups of the layer they name: layers are
written in row groups of `PipelineTuning.layer_group_rows` (8,192) messages. A tag, not
the key: 16 bytes a row instead of ~42, so that indexing the first layer of a 5M store
holds ~200 MB in the driver while it sorts, not ~500 MB; two keys sharing a tag only
make a read larger.

The index only narrows what is read: every reader applies the exact rule to the rows it
reads. A layer without an index (small, or written by an earlier release) is read
whole, as before, and so are a schema's files where the keys name most of their row
groups (`WHOLE_FROM`). Spark and pyarrow skip files whose name starts with `_`, so no
other read of the layer sees the index.
"""

from __future__ import annotations

import functools
import json
import secrets
from bisect import bisect_left, bisect_right
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from p2panda_assets.pipeline.columnar.arrow_io import (
    LAYER_ARROW,
    LocalReadUnavailable,
    layer_filesystem,
)
from p2panda_assets.pipeline.columnar.warehouse import SCHEMA_DIR
from p2panda_assets.pipeline.kernels.declared import MESSAGE_KEY, evaluated
from p2panda_assets.tuning import tuning

INDEX_FILE = "_keys.parquet"
TAGS_PER_GROUP = 1_024  # the index's own row groups: what a lookup of one key reads
WRITTEN_AT_ONCE = 64 * TAGS_PER_GROUP  # index rows encoded at a time
# Where the keys' row groups are more than this share of a schema's, its files are read
# whole: reading row groups picked by the index cost more than reading all of them (1M
# store: 400 keys over 20 schemas, 254 of 267 row groups, 0.36-0.47 s against 0.23 s).
# Where the keys are more than this share of the layer's row groups, the index is not
# read at all: they name most row groups anyway (bench/touched_reads.py).
WHOLE_FROM = 0.5

INDEX_ARROW = pa.schema(
    [
        ("tag", pa.int64()),
        ("file", pa.int32()),  # its place in the metadata's `files`
        ("row_group", pa.int32()),
    ]
)
# The index's metadata (JSON): the layer's files, relative to its root, and the row
# groups of each schema's files.
FILES = b"files"
ROW_GROUPS = b"row_groups"


def key_tags(keys: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """The tag of each of `keys` (none null): its last 8 bytes, zeros in front of a
    shorter one, as a signed 64-bit integer. Keys are hashes, so two share a tag by a
    2^-64 chance, and then a lookup reads more, never less."""
    padded = pc.binary_join_element_wise(pa.scalar(b"\0" * 8), cast(Any, keys), b"")
    last = pc.binary_slice(padded, -8).cast(pa.binary(8))
    if isinstance(last, pa.ChunkedArray):
        last = last.combine_chunks()
    values = np.frombuffer(last.buffers()[1], ">i8", count=len(last), offset=last.offset * 8)
    return values.astype(np.int64)


def index_layer(root: str) -> bool:
    """Write the key index of the layer at `root`, before the layer is committed;
    whether it wrote one: not for a layer of fewer than `key_index_messages`, nor
    where pyarrow cannot open the warehouse (nor does the driver path read it then)."""
    try:
        filesystem, directory = layer_filesystem(root)
    except LocalReadUnavailable:
        return False
    by_schema = _layer_files(filesystem, directory)
    files = [name for names in by_schema.values() for name in names]
    opened = [pq.ParquetFile(f"{directory}/{name}", filesystem=filesystem) for name in files]
    if sum(parquet.metadata.num_rows for parquet in opened) < tuning().key_index_messages:
        return False
    tags, places, groups = (
        np.concatenate(parts)
        for parts in zip(*map(_tags_of, opened, range(len(opened))), strict=True)
    )
    order = np.argsort(tags, kind="stable")
    counts = iter(parquet.metadata.num_row_groups for parquet in opened)  # in `files` order
    row_groups = {schema: sum(next(counts) for _ in names) for schema, names in by_schema.items()}
    metadata = {FILES: json.dumps(files).encode(), ROW_GROUPS: json.dumps(row_groups).encode()}
    staged = f"{directory}/_keys-{secrets.token_hex(6)}.parquet"
    # Written a slice of the sorted order at a time, not as one table encoded at once (a
    # first run of 5M: the process's peak 694 MiB against 771 MiB).
    with pq.ParquetWriter(
        staged, INDEX_ARROW.with_metadata(metadata), filesystem=filesystem
    ) as out:
        for start in range(0, len(order), WRITTEN_AT_ONCE):
            taken = order[start : start + WRITTEN_AT_ONCE]
            columns = [pa.array(tags[taken]), pa.array(places[taken]), pa.array(groups[taken])]
            out.write_table(pa.table(columns, schema=INDEX_ARROW), row_group_size=TAGS_PER_GROUP)
    filesystem.move(staged, f"{directory}/{INDEX_FILE}")
    return True


def _tags_of(parquet: pq.ParquetFile, place: int) -> tuple[np.ndarray, ...]:
    """The tags of one file's keys, and the file's place and row group of each."""
    metadata = parquet.metadata
    sizes = [metadata.row_group(group).num_rows for group in range(metadata.num_row_groups)]
    keys = evaluated(parquet.read(columns=["instance", "kind", "hash"]), MESSAGE_KEY)
    keyed = pc.is_valid(keys).to_numpy(zero_copy_only=False)
    groups = np.repeat(np.arange(len(sizes), dtype=np.int32), sizes)[keyed]
    tags = key_tags(keys.filter(pa.chunked_array([keyed])))
    return tags, np.full(len(tags), place, np.int32), groups


def _layer_files(filesystem: pafs.FileSystem, directory: str) -> dict[str, list[str]]:
    """The Parquet files of the layer at `directory` by schema (from its `schema=`
    directories), each named from the layer's root, as readers find them (none starts
    with `_` or `.`)."""
    return {
        name.removeprefix(SCHEMA_DIR): [
            f"{name}/{info.base_name}"
            for info in _listed(filesystem, f"{directory}/{name}")
            if info.is_file
            and info.base_name.endswith(".parquet")
            and info.base_name[0] not in "_."
        ]
        for name in (
            info.base_name
            for info in _listed(filesystem, directory)
            if info.type == pafs.FileType.Directory and info.base_name.startswith(SCHEMA_DIR)
        )
    }


def _listed(filesystem: pafs.FileSystem, directory: str) -> list[pafs.FileInfo]:
    """What is directly in `directory`, by name."""
    found = filesystem.get_file_info(pafs.FileSelector(directory))
    return sorted(found, key=lambda info: info.base_name)


def lacks_index(root: str) -> bool:
    """Whether the committed layer at `root` has no key index though pyarrow can open
    it (`index_layer` wrote none: the layer is small, or an earlier release wrote it)."""
    try:
        return opened_layer(root).index is None
    except LocalReadUnavailable:
        return False


@dataclass(frozen=True, slots=True)
class Layer:
    """A committed layer as a read opens it, once a process (`opened_layer`): a fragment
    of each of its files (which keeps the file's footer once a scan has read it), and its
    key index's footer with each index row group's tag range."""

    filesystem: pafs.FileSystem
    directory: str
    files: dict[str, dict[str, ds.ParquetFileFragment]]  # by schema, by name (from the root)
    row_groups: dict[str, int]  # of each schema's files
    index: pq.FileMetaData | None  # of `INDEX_FILE`; None: the layer has none
    indexed_files: tuple[str, ...]  # the index's `file` column: places in this
    lowest: tuple[int, ...]
    highest: tuple[int, ...]

    @property
    def dataset(self) -> ds.Dataset:
        """Every message of the layer, with `LAYER_ARROW`'s columns."""
        fragments: list[ds.Fragment] = [f for files in self.files.values() for f in files.values()]
        return ds.FileSystemDataset(fragments, LAYER_ARROW, PARQUET, self.filesystem)

    def groups_holding(self, tags: Iterable[int]) -> list[int]:
        """The index's row groups whose tag range holds one of `tags` (the index is
        sorted, so the groups holding one tag are consecutive)."""
        groups: set[int] = set()
        for tag in tags:
            groups.update(range(bisect_left(self.highest, tag), bisect_right(self.lowest, tag)))
        return sorted(groups)


PARQUET = ds.ParquetFileFormat()


@functools.lru_cache(maxsize=256)
def opened_layer(root: str) -> Layer:
    """The committed layer at `root`, its directories listed and its index's footer read
    once a process, and its files' footers as scans read them: a committed layer and its
    index never change. A read of the 1M store's first run for its new messages, which
    the footers' statistics skip: 0.01 s opened anew, 0.002 s kept."""
    filesystem, directory = layer_filesystem(root)
    files = {
        schema: {
            name: cast(
                ds.ParquetFileFragment,
                PARQUET.make_fragment(
                    f"{directory}/{name}",
                    filesystem=filesystem,
                    partition_expression=pc.field("schema") == schema,
                ),
            )
            for name in names
        }
        for schema, names in _layer_files(filesystem, directory).items()
    }
    unindexed = Layer(filesystem, directory, files, {}, None, (), (), ())
    path = f"{directory}/{INDEX_FILE}"
    if filesystem.get_file_info(path).type == pafs.FileType.NotFound:
        return unindexed
    metadata = pq.ParquetFile(path, filesystem=filesystem).metadata
    kept = metadata.metadata or {}
    indexed_files = tuple(json.loads(kept.get(FILES, b"[]")))
    # An index of no key (a layer whose messages name no instance) is one empty row group.
    groups = range(metadata.num_row_groups) if metadata.num_rows else range(0)
    ranges = [metadata.row_group(g).column(0).statistics for g in groups]
    every_file = sorted(f for names in files.values() for f in names)
    if sorted(indexed_files) != every_file or any(r is None or not r.has_min_max for r in ranges):
        return unindexed  # not this layer's index: never so for a committed layer
    return Layer(
        filesystem,
        directory,
        files,
        json.loads(kept[ROW_GROUPS]),
        metadata,
        indexed_files,
        tuple(cast(int, cast(pq.Statistics, stats).min) for stats in ranges),
        tuple(cast(int, cast(pq.Statistics, stats).max) for stats in ranges),
    )


def read_layers(layers: Sequence[str]) -> ds.Dataset | None:
    """Every message of the committed `layers` (their roots), with `LAYER_ARROW`'s
    columns, their files' footers kept (`opened_layer`); None for no layer."""
    if not layers:
        return None
    return ds.dataset([opened_layer(root).dataset for root in layers])


def located(root: str, keys: Collection[bytes], schemas: Collection[str] | None) -> ds.Dataset:
    """The messages of the committed layer at `root` that may create or name one of
    `keys`, of `schemas` (None: any), as a dataset with `LAYER_ARROW`'s columns: the row
    groups the layer's index names, a schema's files whole where they are most of its
    row groups, the layer whole where it has no index or the keys are many. A superset:
    the caller filters by the rule."""
    layer = opened_layer(root)
    chosen = [schema for schema in layer.files if schemas is None or schema in schemas]
    few = len(keys) <= WHOLE_FROM * sum(layer.row_groups.values())
    places = _indexed_places(layer, chosen, keys) if layer.index is not None and few else {}
    fragments: list[ds.Fragment] = [
        fragment
        if schema not in places
        else cast(ds.Fragment, fragment.subset(row_group_ids=places[schema][name]))
        for schema in chosen
        for name, fragment in layer.files[schema].items()
        if schema not in places or name in places[schema]
    ]
    return ds.FileSystemDataset(fragments, LAYER_ARROW, PARQUET, layer.filesystem)


def _indexed_places(
    layer: Layer, schemas: Sequence[str], keys: Collection[bytes]
) -> dict[str, dict[str, list[int]]]:
    """For each of `schemas` not read whole, the row groups of its files that hold one
    of `keys`'s tags, by file (none for a schema that holds none of them)."""
    assert layer.index is not None
    tags = np.unique(key_tags(pa.array(list(keys), pa.binary())))
    groups = layer.groups_holding(tags.tolist())
    found: dict[str, dict[str, list[int]]] = {schema: {} for schema in schemas}
    if groups:
        path = f"{layer.directory}/{INDEX_FILE}"
        index = pq.ParquetFile(path, filesystem=layer.filesystem, metadata=layer.index)
        rows = index.read_row_groups(groups, columns=["tag", "file", "row_group"])
        rows = rows.filter(pc.is_in(rows["tag"], value_set=pa.array(tags, pa.int64())))
        by_file = rows.group_by("file").aggregate([("row_group", "distinct")])
        files = cast(list[int], by_file["file"].to_pylist())
        distinct = cast(list[list[int]], by_file["row_group_distinct"].to_pylist())
        for file, row_groups in zip(files, distinct, strict=True):
            name = layer.indexed_files[file]
            schema = name.split("/", 1)[0].removeprefix(SCHEMA_DIR)
            if schema in found:
                found[schema][name] = sorted(row_groups)
    return {
        schema: files
        for schema, files in found.items()
        if sum(map(len, files.values())) <= WHOLE_FROM * layer.row_groups[schema]
    }
