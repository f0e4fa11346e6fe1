"""The decoded check reads a live run's companions together (`decoded_model_together`):
one validation must find exactly what one validation a schema finds. Every check counts
the same failing rows, row by row against the row's own schema (its schema log), and an
entry repeated across two schemas is not a duplicate: each schema's model holds only its
own messages."""

from __future__ import annotations

from collections import Counter
from decimal import Decimal

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from p2panda_assets.defs.checks.decoded import (
    ASSIGNMENTS,
    KINDS,
    TOGETHER,
    decoded_model_in_driver,
    decoded_model_together,
)
from p2panda_assets.defs.checks.tally import ArrowTally, summarize, validate_in_driver
from p2panda_assets.pipeline.columnar.arrow_io import DECODED_ARROW

SCHEMAS = [f"{author * 32}-{log_id}" for author, log_id in (("ab", 0), ("ab", 1), ("cd", 0))]
AUTHORS = [bytes.fromhex("ab" * 32), bytes.fromhex("cd" * 32), b"short"]
HASHES = [bytes([0, 32, n]) + bytes(31) for n in range(4)] + [b"too short"]


@st.composite
def decoded_row(draw: st.DrawFn) -> tuple[str, dict[str, object]]:
    """A schema and one row of its decoded messages, valid or not in any column."""
    schema = draw(st.sampled_from(SCHEMAS))
    row = {
        "author": draw(st.sampled_from(AUTHORS)),
        "log_id": Decimal(draw(st.integers(0, 1))),
        "seq": Decimal(draw(st.integers(0, 2))),
        "hash": draw(st.sampled_from(HASHES)),
        "batch": draw(st.integers(0, 2)),
        "is_schema_log": draw(st.booleans()),
        "kind": draw(st.sampled_from([*KINDS[:3], None, "bogus"])),
        "schema_version": draw(st.sampled_from([None, Decimal(0), Decimal(1)])),
        "error": draw(st.sampled_from([None, "bad-cbor"])),
        "payload": draw(st.sampled_from([None, b"\xa0"])),
        "message": draw(st.sampled_from([None, b"\x80"])),
        "instance": None,
        "assignment": draw(st.sampled_from([*ASSIGNMENTS[:2], "bogus"])),
    }
    return schema, row


def _findings(table: pa.Table, schemas: list[str]) -> tuple[list[str], dict[str, int]]:
    tally = ArrowTally(table)
    if len(schemas) == 1 and TOGETHER not in table.column_names:
        model = decoded_model_in_driver(schemas[0], tally)
    else:
        model = decoded_model_together(schemas, tally)
    return summarize(validate_in_driver(table, model)), tally.findings


@settings(max_examples=150, deadline=None)
@given(st.lists(decoded_row(), min_size=1, max_size=12))
def test_together_finds_what_each_schema_finds(rows: list[tuple[str, dict[str, object]]]) -> None:
    schemas = sorted({schema for schema, _ in rows})
    each: Counter[str] = Counter()
    each_passes = True
    for schema in schemas:
        own = pa.Table.from_pylist([row for s, row in rows if s == schema], DECODED_ARROW)
        lines, findings = _findings(own, [schema])
        each_passes = each_passes and not lines
        each.update(findings)
    table = pa.Table.from_pylist([row for _, row in rows], DECODED_ARROW)
    if len(schemas) > 1:
        table = table.append_column(TOGETHER, pa.array([schema for schema, _ in rows]))
    lines, findings = _findings(table, schemas)
    assert (not lines) == each_passes
    assert Counter(findings) == each


def test_an_entry_in_two_schemas_is_no_duplicate_but_one_twice_in_a_schema_is() -> None:
    ab0, ab1 = SCHEMAS[:2]
    row = {
        "author": AUTHORS[1],
        "log_id": Decimal(5),
        "seq": Decimal(1),
        "hash": HASHES[0],
        "batch": 1,
        "is_schema_log": False,
        "kind": "create",
        "schema_version": Decimal(1),
        "error": None,
        "payload": None,
        "message": b"\x80",
        "instance": None,
        "assignment": ASSIGNMENTS[0],
    }
    both = pa.Table.from_pylist([row, row], DECODED_ARROW)
    apart = both.append_column(TOGETHER, pa.array([ab0, ab1]))
    assert _findings(apart, [ab0, ab1]) == ([], {})
    twice = both.append_column(TOGETHER, pa.array([ab0, ab0]))
    lines, findings = _findings(twice, [ab0, ab1])
    assert findings == {"hash_unique": 1, "entry_unique": 1}
    assert lines
