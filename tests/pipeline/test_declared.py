"""Each rule declared once in `pipeline.kernels.declared` is the rule it names, fast (issue
55): built as pyarrow (the driver path's half) over every combination of its columns'
values, nulls included, it gives what the rule stated plainly in Python gives. The Spark
half is held to this one in `tests/pipeline/test_declared_in_spark.py` (marked spark)."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest

from p2panda_assets.pipeline.kernels.declared import (
    CHAIN_ACCOUNT,
    CHAIN_ACCOUNTS,
    CHAIN_LOG,
    ELEMENT,
    MESSAGE_KEY,
    NEW_WITHOUT_KEY,
    UNEXPLAINED,
    And,
    AnyElement,
    Chars,
    Col,
    Expr,
    Gt,
    IsNull,
    Lit,
    Matches,
    Not,
    after,
    assigned_to,
    count_where,
    evaluated,
    project,
    touched_anew,
    touched_before,
)

# Every combination of a few values of each column the rules read.
VALUES: dict[str, tuple[Any, ...]] = {
    "row_type": ("log", "account", None),
    "hash": (b"h1", b"h2"),
    "state": ("rejected", None),
    "reason": ("fork", None),
    "message": ("why", None),
    "kind": ("create", "update", "delete", None),
    "instance": (b"i1", None),
    "message_error": ("cbor-malformed", None),
    "batch": (1, 2, 3),
    "built_batch": (2,),
    "key": (b"k", None),
    "assignment": ("assigned", "pending", "duplicate"),
    "schema": ("s1", "s2", None),
    # a text's length in characters is not its bytes' ("äöü": 3 and 6)
    "text": ("abc", "abcd", "äöü", "äöüß", "0a1f", None),
}
TYPES = {
    "hash": pa.binary(),
    "instance": pa.binary(),
    "key": pa.binary(),
    "batch": pa.int64(),
    "built_batch": pa.int64(),
}


def every(*columns: str) -> list[dict[str, Any]]:
    """Every combination of the values of `columns`, as rows."""
    return [
        dict(zip(columns, values, strict=True))
        for values in itertools.product(*(VALUES[c] for c in columns))
    ]


def table_of(rows: list[dict[str, Any]]) -> pa.Table:
    names = list(rows[0])
    schema = pa.schema([(name, TYPES.get(name, pa.string())) for name in names])
    return pa.Table.from_pylist(rows, schema)


def row_type_is(row_type: str) -> Callable[[dict[str, Any]], bool | None]:
    return lambda r: None if r["row_type"] is None else r["row_type"] == row_type


def unexplained(r: dict[str, Any]) -> bool:
    return r["kind"] is None and r["message_error"] is None


def message_key(r: dict[str, Any]) -> bytes | None:
    if r["instance"] is not None:
        return r["instance"]
    return r["hash"] if r["kind"] == "create" else None


def new_without_key(r: dict[str, Any]) -> bool:
    return r["batch"] > r["built_batch"] and r["key"] is None


def after_2(r: dict[str, Any]) -> bool:
    return r["batch"] > 2


def touched_anew_after_2_or_3(r: dict[str, Any]) -> bool:
    return r["batch"] > 2


def touched_before_by_i1_h2_not_after_2_or_3(r: dict[str, Any]) -> bool:
    return message_key(r) in (b"i1", b"h2") and not r["batch"] > 2


def assigned_to_s1(r: dict[str, Any]) -> bool:
    return r["assignment"] == "assigned" and r["schema"] == "s1"


def longer_than_3(r: dict[str, Any]) -> bool:
    return r["text"] is not None and len(r["text"]) > 3


def not_hex_4(r: dict[str, Any]) -> bool | None:
    return None if r["text"] is None else re.fullmatch("[0-9a-f]{4}", r["text"]) is None


LONGER_THAN_3 = And(Not(IsNull(Col("text"))), Gt(Chars(Col("text")), Lit(3, "long")))
NOT_HEX_4 = Not(Matches(Col("text"), "^[0-9a-f]{4}$"))

# (name, declaration, the columns it reads, the rule stated plainly: None where SQL's null)
CASES: list[tuple[str, Expr, tuple[str, ...], Callable[[dict[str, Any]], Any]]] = [
    ("chain log", CHAIN_LOG, ("row_type",), row_type_is("log")),
    ("chain account", CHAIN_ACCOUNT, ("row_type",), row_type_is("account")),
    ("unexplained", UNEXPLAINED, ("kind", "message_error"), unexplained),
    ("message key", MESSAGE_KEY, ("instance", "kind", "hash"), message_key),
    ("new without key", NEW_WITHOUT_KEY, ("batch", "built_batch", "key"), new_without_key),
    ("after", after(2), ("batch",), after_2),
    ("touched anew", touched_anew([3, 2]), ("batch",), touched_anew_after_2_or_3),
    (
        "touched before",
        touched_before([b"i1", b"h2"], [3, 2]),
        ("instance", "kind", "hash", "batch"),
        touched_before_by_i1_h2_not_after_2_or_3,
    ),
    ("assigned to", assigned_to(["s1"]), ("assignment", "schema"), assigned_to_s1),
    ("longer than 3 characters", LONGER_THAN_3, ("text",), longer_than_3),
    ("not 4 hex digits", NOT_HEX_4, ("text",), not_hex_4),
]

# Arrays for `AnyElement`: null, empty, with a null element, with elements that are and
# are not 4 hex digits.
ARRAYS = [None, [], ["0a1f", None], ["0a1f"], ["abcd", "zz"], ["zz", "zz"], [None]]
ARRAY_RULES: list[tuple[str, Expr, Callable[[str | None], bool]]] = [
    ("a null element", AnyElement(Col("array"), IsNull(Col(ELEMENT))), lambda e: e is None),
    (
        "an element not 4 hex digits",
        AnyElement(Col("array"), Not(Matches(Col(ELEMENT), "^[0-9a-f]{4}$"))),
        lambda e: e is not None and re.fullmatch("[0-9a-f]{4}", e) is None,
    ),
]


def arrays_table() -> pa.Table:
    return pa.table({"array": pa.array(ARRAYS, pa.list_(pa.string()))})


@pytest.mark.parametrize(
    ("expr", "columns", "rule"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_a_declaration_is_its_rule(
    expr: Expr, columns: tuple[str, ...], rule: Callable[[dict[str, Any]], Any]
) -> None:
    rows = every(*columns)
    assert evaluated(table_of(rows), expr).to_pylist() == [rule(row) for row in rows]


def test_the_chain_accounts_are_the_account_rows_projected() -> None:
    rows = every("row_type", "hash", "state", "reason", "message")
    got = project(table_of(rows), CHAIN_ACCOUNTS, CHAIN_ACCOUNT).to_pylist()
    expected = [
        {"hash": r["hash"], "schema_id": None, "state": r["state"], "reason": r["reason"],
         "message": r["message"], "origin": "chain"}
        for r in rows
        if r["row_type"] == "account"
    ]  # fmt: skip
    assert got == expected


@pytest.mark.parametrize(
    ("expr", "holds"), [r[1:] for r in ARRAY_RULES], ids=[r[0] for r in ARRAY_RULES]
)
def test_any_element_counts_each_array_with_such_an_element_once(
    expr: Expr, holds: Callable[[str | None], bool]
) -> None:
    expected = sum(1 for array in ARRAYS if array and any(holds(e) for e in array))
    assert count_where(arrays_table(), expr) == expected
