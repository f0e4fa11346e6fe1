"""u64 columns cross the Arrow bridge of `map_groups` as ints and come back exact: the
whole u64 range, and null. `map_groups_locally` calls the function once per group, its
rows in order, as `map_groups` does in the partitions."""

from __future__ import annotations

from decimal import Decimal

import pyarrow as pa
import pytest

from p2panda_assets.pipeline.kernels.batches import (
    U64_DECIMAL,
    Row,
    map_groups_locally,
    python_rows,
    record_batch,
)
from p2panda_assets.pipeline.spark import groups
from p2panda_assets.protocol.ids import MAX_U64

SCHEMA = pa.schema([("name", pa.string()), ("seq", U64_DECIMAL), ("payload", pa.binary())])
EDGES = [0, 1, 247, 248, 2**53 + 1, 2**63, MAX_U64, None]


def test_ints_into_a_decimal_column_equal_the_decimals_they_stand_for() -> None:
    columns: dict[str, list[object]] = {
        "name": [str(n) for n in EDGES],
        "seq": list(EDGES),
        "payload": [b"x"] * len(EDGES),
    }
    as_decimals = {**columns, "seq": [None if n is None else Decimal(n) for n in EDGES]}
    expected = pa.RecordBatch.from_pydict(as_decimals, schema=SCHEMA)
    assert record_batch(columns, SCHEMA).equals(expected)


def test_decimal_columns_come_out_as_ints() -> None:
    batch = record_batch(
        {"name": ["a"] * len(EDGES), "seq": list(EDGES), "payload": [b""] * len(EDGES)}, SCHEMA
    )
    rows = python_rows(batch)
    assert [row["seq"] for row in rows] == EDGES
    assert all(type(row["seq"]) is int for row in rows if row["seq"] is not None)
    assert [row["name"] for row in rows] == ["a"] * len(EDGES)


def test_a_batch_without_decimal_columns_is_read_as_it_is() -> None:
    batch = pa.RecordBatch.from_pydict({"n": [1, 2]}, schema=pa.schema([("n", pa.int64())]))
    assert python_rows(batch) == [{"n": 1}, {"n": 2}]


def test_a_value_beyond_u64_is_refused_not_wrapped() -> None:
    with pytest.raises(OverflowError):
        record_batch({"name": ["a"], "seq": [MAX_U64 + 1], "payload": [b""]}, SCHEMA)


def test_each_group_is_mapped_once_with_its_rows_in_order() -> None:
    rows: list[Row] = [
        {"log": log, "seq": seq, "payload": b"x"}
        for seq, log in [(3, b"b"), (1, b"a"), (2, b"b"), (2, b"a"), (1, b"b"), (MAX_U64, b"a")]
    ]
    out_schema = pa.schema([("log", pa.binary()), ("seqs", pa.list_(U64_DECIMAL))])

    def seqs(group: list[Row]) -> list[Row]:
        return [{"log": group[0]["log"], "seqs": [row["seq"] for row in group]}]

    table = map_groups_locally(rows, ("log",), ("seq",), seqs, out_schema)
    assert table.schema == out_schema
    assert table.to_pylist() == [
        {"log": b"a", "seqs": [Decimal(1), Decimal(2), Decimal(MAX_U64)]},
        {"log": b"b", "seqs": [Decimal(1), Decimal(2), Decimal(3)]},
    ]


def test_output_batches_are_cut_by_rows_or_by_bytes_after_a_group() -> None:
    """A batch ends after the group that brings it to `OUTPUT_BATCH` rows or
    `OUTPUT_BYTES` bytes of binary values: a binary column holds at most 2 GiB, which
    4,096 reduced rows of 512 KiB blobs reach. Every row comes back, in order."""
    small = [[{"name": f"s{g}.{i}", "seq": i, "payload": b"x"} for i in range(2)] for g in range(4)]
    big = [[{"name": f"b{g}", "seq": g, "payload": b"y" * 100}] for g in range(4)]
    none = [[{"name": "n", "seq": None, "payload": None}]]

    def cut(mapped: list[list[Row]], rows: int, size: int) -> list[int]:
        batches = list(groups.output_batches(mapped, SCHEMA, rows, size))
        back = [row for batch in batches for row in python_rows(batch)]
        assert back == [row for group in mapped for row in group]
        return [batch.num_rows for batch in batches]

    assert cut(small, 5, 10**9) == [6, 2]  # by rows: three groups of two, then one
    assert cut([*big, *none], 100, 250) == [3, 2]  # by bytes: 300 of them, then the rest
    assert cut([*small, *none], 100, 250) == [9]  # neither
