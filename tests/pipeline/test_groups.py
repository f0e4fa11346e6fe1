"""u64 columns cross the Arrow bridge of `map_groups` as ints and come back exact: the
whole u64 range, and null. `map_groups_locally` calls the function once per group, its
rows in order, as `map_groups` does in the partitions."""

from __future__ import annotations

from decimal import Decimal

import pyarrow as pa
import pytest

from p2panda_assets.pipeline.groups import (
    U64_DECIMAL,
    Row,
    map_groups_locally,
    python_rows,
    record_batch,
)
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
