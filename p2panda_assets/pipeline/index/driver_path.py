"""The driver path of the index step (`pipeline.index.paths.DriverIndexSteps`): the verified
batches read, chained, written as a chained layer and accounted for in the process that
runs the step, with pyarrow, when there are few entries to chain. No Spark job.

Every rule is the Spark path's own: the chain rules run in `chain.chain_group` (by
`chain_locally`, as the Spark path's driver chaining already did), the decode errors
come from verification or `indexed_message`, the accounts of waiting logs from
`pipeline.index.accounts.pending_group`. What differs is how rows are read, joined and
written: Arrow tables and `pyarrow.dataset` in place of Spark frames, one Parquet file per
schema partition, as the Spark path writes for few entries.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Sequence
from typing import cast

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from p2panda_assets.pipeline.columnar.arrow_io import (
    LAYER_ARROW,
    SCHEMA_PARTITIONING,
    layer_filesystem,
    layers_dataset,
    parquet_dataset,
)
from p2panda_assets.pipeline.columnar.layers import DECODED_COLUMNS
from p2panda_assets.pipeline.columnar.warehouse import Warehouse
from p2panda_assets.pipeline.index.verify import VERIFIED_ARROW
from p2panda_assets.pipeline.kernels.batches import Row, python_rows
from p2panda_assets.pipeline.kernels.chain import CHAIN_INPUT
from p2panda_assets.pipeline.kernels.declared import (
    CHAIN_ACCOUNT,
    UNEXPLAINED,
    evaluated,
    expression,
)
from p2panda_assets.protocol.message_index import indexed_message
from p2panda_assets.store.pipeline_state import PipelineState
from p2panda_assets.tuning import tuning

# The verified batches as the later steps read them (`verify.VERIFIED_READ`).
VERIFIED_READ_ARROW = pa.schema(
    [*VERIFIED_ARROW, pa.field("entry", pa.binary()), pa.field("batch", pa.int32())]
)
# A batch's files: its number is its directory's (`batch=<n>`), not a column.
BATCH_FILE_ARROW = pa.schema([f for f in VERIFIED_READ_ARROW if f.name != "batch"])


def read_verified_locally(
    warehouse: Warehouse, state: PipelineState, since: int | None = None
) -> pa.Table:
    """The good entries of the verified batches (`verify.read_verified` with verdict
    `ok`): every one, or those of the batches after `since`."""
    low = state.compacted_through if since is None else since
    parts = []
    if since is None and state.compacted_run is not None:
        parts.append(parquet_dataset(warehouse.compacted(state.compacted_run), VERIFIED_READ_ARROW))
    ok = ds.field("verdict") == "ok"
    tables = [part.to_table(filter=ok) for part in parts]
    for number in range(low + 1, state.batch + 1):
        batch = parquet_dataset(warehouse.batch(number), BATCH_FILE_ARROW).to_table(filter=ok)
        numbers = pa.array([number] * batch.num_rows, pa.int32())
        tables.append(batch.append_column("batch", numbers))
    if not tables:
        return VERIFIED_READ_ARROW.empty_table()
    return pa.concat_tables([t.select(VERIFIED_READ_ARROW.names) for t in tables])


def count_new_verified(warehouse: Warehouse, since: int, through: int) -> int:
    """How many entries the verified batches after `since` hold, from their files'
    footers (the good and the rejected: a bound on those to chain)."""
    return sum(
        parquet_dataset(warehouse.batch(number), BATCH_FILE_ARROW).count_rows()
        for number in range(since + 1, through + 1)
    )


def rows_of(table: pa.Table, columns: Sequence[str]) -> list[Row]:
    """The `columns` of `table` as `python_rows` gives them (u64 decimals as ints)."""
    selected = table.select(list(columns))
    return [row for batch in selected.to_batches() for row in python_rows(batch)]


def chain_rows(verified: pa.Table) -> list[Row]:
    """What the chain step reads of each verified entry (`chain.CHAIN_INPUT`)."""
    return rows_of(verified, CHAIN_INPUT)


def accepted_locally(verified: pa.Table, chained: pa.Table, held: int) -> pa.Table:
    """`chaining.accepted_entries`: the verified entries less those the chain rules
    rejected or hold (`chained`'s account rows)."""
    if held == 0:
        return verified
    accounts = chained.filter(expression(CHAIN_ACCOUNT))
    refused = pc.is_in(verified["hash"], value_set=accounts["hash"].combine_chunks())
    return verified.filter(pc.invert(refused))


def decoded_locally(accepted: pa.Table, planned: pa.Table, unexplained: int) -> pa.Table:
    """`layers.write_chained`'s rows: each accepted entry of a planned log with its
    plan's columns (`log_plan.PLANNED_ARROW`: schema, assignment, is_schema_log), the
    batch as a long, and `error` (`layers.with_decode_errors`: as verification kept it,
    or, where a batch did not keep it (`declared.UNEXPLAINED`), the reason
    `indexed_message` gives)."""
    plans = rows_of(planned, ["author", "log_id", "schema", "assignment", "is_schema_log"])
    planned_logs = {
        (row["author"], row["log_id"]): (row["schema"], row["assignment"], row["is_schema_log"])
        for row in plans
    }
    authors = cast(list[bytes], accepted["author"].to_pylist())
    log_ids = cast(list[int], accepted["log_id"].cast(pa.uint64()).to_pylist())
    fates = [planned_logs.get(key) for key in zip(authors, log_ids, strict=True)]
    table = accepted.filter(pa.array([fate is not None for fate in fates], pa.bool_()))
    kept = [fate for fate in fates if fate is not None]
    errors = table["message_error"].to_pylist()
    if unexplained:
        again = evaluated(table, UNEXPLAINED).to_pylist()
        payloads = table["payload"].to_pylist()
        errors = [
            indexed_message(cast(bytes, payload))[1] if unknown else error
            for unknown, payload, error in zip(again, payloads, errors, strict=True)
        ]
    columns: dict[str, pa.Array | pa.ChunkedArray] = {
        "batch": table["batch"].cast(pa.int64()),
        "is_schema_log": pa.array([is_schema_log for _, _, is_schema_log in kept], pa.bool_()),
        "error": pa.array(errors, pa.string()),
        "assignment": pa.array([assignment for _, assignment, _ in kept], pa.string()),
        "schema": pa.array([schema for schema, _, _ in kept], pa.string()),
    }
    names = (*DECODED_COLUMNS, "schema")
    arrays = [columns[name] if name in columns else table[name] for name in names]
    return pa.table(arrays, schema=LAYER_ARROW)


def write_chained_locally(decoded: pa.Table, root: str) -> None:
    """The decoded messages as a chained layer at `root`: `schema=` partitions of one
    file each, as Spark writes a few entries (`layers.write_chained`)."""
    filesystem, directory = layer_filesystem(root)
    ds.write_dataset(
        decoded,
        directory,
        format="parquet",
        partitioning=SCHEMA_PARTITIONING,
        filesystem=filesystem,
        basename_template=f"part-{secrets.token_hex(6)}-{{i}}.parquet",
        existing_data_behavior="overwrite_or_ignore",
        max_rows_per_group=tuning().layer_group_rows,
    )


def read_layers_locally(layers: Sequence[str]) -> pa.Table:
    """Every message of the chained `layers` (their roots), with its `schema`."""
    dataset = layers_dataset(layers)
    assert dataset is not None  # layers is not empty
    return dataset.to_table()


def remove_locally(path: str) -> None:
    """Remove the directory `path`, if it is there."""
    filesystem, directory = layer_filesystem(path)
    if filesystem.get_file_info(directory).type != pa.fs.FileType.NotFound:
        filesystem.delete_dir(directory)


def accepted_at_locally(
    layers: Sequence[str], positions: Iterable[tuple[bytes, int, int]]
) -> list[tuple[tuple[bytes, int, int], bytes]]:
    """`IndexSteps.accepted_at`: the hash of the accepted entry at each (author, log, seq)
    the chained `layers` hold."""
    wanted = set(positions)
    dataset = layers_dataset(layers)
    if not wanted or dataset is None:
        return []
    authors = pa.array(sorted({author for author, _, _ in wanted}), pa.binary())
    table = dataset.to_table(
        columns=["author", "log_id", "seq", "hash"], filter=ds.field("author").isin(authors)
    )
    found = []
    for row in rows_of(table, ["author", "log_id", "seq", "hash"]):
        key = (cast(bytes, row["author"]), cast(int, row["log_id"]), cast(int, row["seq"]))
        if key in wanted:
            found.append((key, cast(bytes, row["hash"])))
    return found
