"""Rows and Arrow batches, the one shape every step hands rows in on both paths: a row is
a dict, a batch an Arrow record batch of a declared schema. `map_groups_locally` is
`spark.groups.map_groups` for rows the process holds: the same grouping, with no Spark."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import groupby
from typing import Any, cast

import pyarrow as pa

Row = dict[str, object]
Columns = dict[str, list[Any]]  # one Arrow batch, column by column

# An Arrow batch handed back to Spark holds up to this many rows, or this many bytes of
# binary values (a binary column holds at most 2 GiB: 4,096 reduced rows with a 512 KiB
# blob each were exactly that), whichever comes first.
OUTPUT_BATCH = 4096
OUTPUT_BYTES = 64 * 2**20


def arrow_schema(fields: list[tuple[str, pa.DataType]]) -> pa.Schema:
    """`pa.schema(fields)`, its argument typed so a literal list of mixed Arrow types
    type-checks (inferred alone, it would be a list of `object`)."""
    return pa.schema(fields)


# Spark's decimal(20,0) is how the product holds u64 values (log ids, seq nums,
# versions). As Python's Decimal they are slow on both sides of the bridge: out of
# Arrow 1.29 us a value against 0.34 us as an int, into Arrow 0.40 us against 0.06 us
# (pyarrow 26, 200,000 values). So such columns cross as uint64, cast by Arrow in one
# call per column; chaining and reduction read two or three of them per entry.
U64_DECIMAL = pa.decimal128(20, 0)


def python_rows(batch: pa.RecordBatch) -> list[Row]:
    """The batch's rows as dicts; decimal(20,0) columns as ints (they hold u64 values)."""
    if any(field.type == U64_DECIMAL for field in batch.schema):
        columns = [
            column.cast(pa.uint64()) if column.type == U64_DECIMAL else column
            for column in batch.columns
        ]
        batch = pa.RecordBatch.from_arrays(columns, names=batch.schema.names)
    return batch.to_pylist()


WARM_UP_SCHEMA = pa.schema([("n", U64_DECIMAL)])


def warm_casts() -> None:
    """Cast a u64 column both ways once. A process's first Arrow cast sets up pyarrow's
    cast kernels, ~0.2 s (pyarrow 26): the first batch of each Python worker's first
    verification, chain or reduction paid it, and so did the driver's first
    verification of a few entries."""
    python_rows(record_batch({"n": [0]}, WARM_UP_SCHEMA))


def record_batch(columns: dict[str, list[object]], schema: pa.Schema) -> pa.RecordBatch:
    """A batch of `schema` from Python lists, decimal(20,0) columns given as ints."""
    arrays = [
        pa.array(columns[field.name], pa.uint64()).cast(U64_DECIMAL)
        if field.type == U64_DECIMAL
        else pa.array(columns[field.name], field.type)
        for field in schema
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def output_batches(
    mapped: Iterable[list[Row]],
    schema: pa.Schema,
    most_rows: int = OUTPUT_BATCH,
    most_bytes: int = OUTPUT_BYTES,
) -> Iterator[pa.RecordBatch]:
    """The rows of each group, as `fn` mapped them, in batches of `schema` of at most
    `most_rows` rows or about `most_bytes` bytes of binary values (a batch is cut after
    the group that reaches either)."""
    names = schema.names
    sized = [f.name for f in schema if pa.types.is_binary(f.type)]
    out: list[Row] = []
    size = 0
    for rows in mapped:
        out += rows
        values = cast(list[bytes | None], [row.get(n) for row in rows for n in sized])
        size += sum(len(value) for value in values if value)
        if len(out) >= most_rows or size >= most_bytes:
            yield _batch(out, names, schema)
            out, size = [], 0
    if out:
        yield _batch(out, names, schema)


def map_groups_locally(
    rows: list[Row],
    keys: Sequence[str],
    order: Sequence[str],
    fn: Callable[[list[Row]], list[Row]],
    schema: pa.Schema,
) -> pa.Table:
    """`map_groups` in the driver, over rows it holds (as `python_rows` gives them): for
    a few rows, one loop here costs less than the shuffle and the Python stage."""

    def sort_key(row: Row) -> tuple[Any, ...]:
        return tuple(row[k] for k in (*keys, *order))

    def group_key(row: Row) -> tuple[Any, ...]:
        return tuple(row[k] for k in keys)

    out: list[Row] = []
    for _, group in groupby(sorted(rows, key=sort_key), key=group_key):
        out += fn(list(group))
    return pa.Table.from_batches([_batch(out, schema.names, schema)], schema=schema)


def _batch(rows: list[Row], names: list[str], schema: pa.Schema) -> pa.RecordBatch:
    return record_batch({name: [row.get(name) for row in rows] for name in names}, schema)
