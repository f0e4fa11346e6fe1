"""Every reason code of the one documented list is proved by at least one test that
names it, so a new code cannot land untested; each belongs to one layer, and the codes
on the wire stay as they were when they were grouped by layer (issue 55)."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from p2panda_assets import errors
from p2panda_assets.errors import BY_LAYER, SECTIONS, Layer, Reason

TESTS = Path(__file__).parent


def test_every_reason_code_is_named_by_a_test() -> None:
    sources = "\n".join(
        path.read_text() for path in TESTS.rglob("*.py") if path.name != Path(__file__).name
    )
    untested = [
        reason.value
        for reason in Reason
        if f"Reason.{reason.name}" not in sources
        and f"error: {reason.value}:" not in sources
        and f'"{reason.value}"' not in sources
    ]
    assert untested == []


# The codes as `Reason` held them before it was grouped by layer (issue 55), copied: no
# grouping or reordering may change what the wire carries. A new code is added here too.
WIRE = {
    "TRUNCATED": "truncated",
    "TRAILING_BYTES": "trailing-bytes",
    "UNKNOWN_TAG": "unknown-tag",
    "NON_CANONICAL_VARU64": "non-canonical-varu64",
    "SEQ_ZERO": "seq-zero",
    "BAD_HASH": "bad-hash",
    "MISSING_LINK": "missing-link",
    "UNEXPECTED_LINK": "unexpected-link",
    "BAD_SIGNATURE": "bad-signature",
    "PAYLOAD_TOO_LARGE": "payload-too-large",
    "PAYLOAD_SIZE_MISMATCH": "payload-size-mismatch",
    "PAYLOAD_HASH_MISMATCH": "payload-hash-mismatch",
    "MISSING_PAYLOAD": "missing-payload",
    "PAYLOAD_CONFLICT": "payload-conflict",
    "BACKLINK_MISMATCH": "backlink-mismatch",
    "LIPMAA_MISMATCH": "lipmaa-mismatch",
    "HASH_ALGORITHM_MISMATCH": "hash-algorithm-mismatch",
    "FORK": "fork",
    "AFTER_END_OF_LOG": "after-end-of-log",
    "CBOR_MALFORMED": "cbor-malformed",
    "CBOR_DUPLICATE_KEY": "cbor-duplicate-key",
    "CBOR_TOO_DEEP": "cbor-too-deep",
    "CBOR_NON_TEXT_KEY": "cbor-non-text-key",
    "CBOR_UNSUPPORTED": "cbor-unsupported",
    "UNKNOWN_KIND": "unknown-kind",
    "UNKNOWN_KEY": "unknown-key",
    "MISSING_KEY": "missing-key",
    "UNEXPECTED_KEY": "unexpected-key",
    "BAD_TYPE": "bad-type",
    "BAD_VALUE": "bad-value",
    "BAD_NAME": "bad-name",
    "BAD_FIELD_NAME": "bad-field-name",
    "UNKNOWN_TYPE": "unknown-type",
    "NOT_SCHEMA_MESSAGE": "not-schema-message",
    "FIELD_EXISTS": "field-exists",
    "FIELD_MISSING": "field-missing",
    "DUPLICATE_FIELD_CHANGE": "duplicate-field-change",
    "BAD_DEFAULT": "bad-default",
    "BAD_VALIDATION": "bad-validation",
    "BAD_REVERT_TARGET": "bad-revert-target",
    "SCHEMA_FROZEN": "schema-frozen",
    "NOT_INSTANCE_MESSAGE": "not-instance-message",
    "NOT_AUTHOR": "not-author",
    "MIXED_LOG": "mixed-log",
    "REVERTED_VERSION": "reverted-version",
    "REJECTED_VERSION": "rejected-version",
    "UNKNOWN_FIELD": "unknown-field",
    "INVALID_VALUE": "invalid-value",
    "VALIDATION_FAILED": "validation-failed",
    "UNKNOWN_INSTANCE": "unknown-instance",
    "DUPLICATE_LOG": "duplicate-log",
    "RELATION_CYCLE": "relation-cycle",
    "WRONG_SCHEMA": "wrong-schema",
    "INSTANCE_DELETED": "instance-deleted",
    "BAD_HEX": "bad-hex",
    "BAD_INPUT": "bad-input",
    "BAD_USAGE": "bad-usage",
    "UNREADABLE_FILE": "unreadable-file",
    "UNWRITABLE_FILE": "unwritable-file",
    "BAD_STATE": "bad-state",
    "KEY_EXISTS": "key-exists",
    "NO_KEY": "no-key",
    "SCHEMA_EXISTS": "schema-exists",
    "UNKNOWN_SCHEMA": "unknown-schema",
    "NAME_TAKEN": "name-taken",
    "NO_CHANGE": "no-change",
    "UNCONFIRMED": "unconfirmed",
    "DATABASE_UNAVAILABLE": "database-unavailable",
    "SETUP": "setup",
    "INTERNAL": "internal",
    "BUSY": "busy",
    "NO_EXECUTORS": "no-executors",
    "STALLED": "stalled",
    "OUT_OF_MEMORY": "out-of-memory",
    "AWAITING_ENTRY": "awaiting-entry",
    "AWAITING_SCHEMA": "awaiting-schema",
    "AWAITING_VERSION": "awaiting-version",
}


def test_the_wire_codes_are_unchanged() -> None:
    assert {reason.name: reason.value for reason in Reason} == WIRE


def test_every_code_belongs_to_exactly_one_layer() -> None:
    for reason in Reason:
        holding = [layer for layer, codes in BY_LAYER.items() if reason in codes]
        assert holding == [reason.layer], reason
    assert all(BY_LAYER[layer] for layer in Layer)  # no empty layer


def test_the_layers_are_the_sections_of_the_list() -> None:
    """`SECTIONS` names the first code under each `# --- ...` comment of `Reason`, in
    order: a code is in the layer of the section it is declared in."""
    source = inspect.getsource(errors.Reason)
    body = ast.parse(source).body[0]
    assert isinstance(body, ast.ClassDef)
    headers = [n for n, line in enumerate(source.splitlines(), 1) if "# ---" in line]
    codes = [
        (node.lineno, target.id)
        for node in body.body
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name)
    ]
    firsts = [next(name for line, name in codes if line > header) for header in headers]
    assert firsts == [SECTIONS[layer].name for layer in Layer]
