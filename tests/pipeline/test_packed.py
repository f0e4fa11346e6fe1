"""Packed messages (`pipeline.kernels.packed`): what the reduction unpacks is exactly what
`decode_message` gives for the payload, whatever the values (no Spark here)."""

from __future__ import annotations

import os
import pickle
from datetime import UTC

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from p2panda_assets.errors import P2pandaError, Reason
from p2panda_assets.pipeline.kernels.packed import message_of, pack_message, unpack_message
from p2panda_assets.protocol.cbor import encode_cbor
from p2panda_assets.protocol.messages import (
    Create,
    Delete,
    SchemaMigration,
    SchemaRevert,
    decode_message,
)

AUTHOR = bytes(range(32))
YASMF = b"\x00\x20" + bytes(range(100, 132))
YAMF = b"\x00\x40" + bytes(range(64))

SCALARS = st.one_of(
    st.booleans(),
    st.integers(min_value=-(2**64), max_value=2**64 - 1),
    st.floats(),  # NaN, infinities and -0.0 too
    st.text(),
    st.binary(),
    st.datetimes(timezones=st.just(UTC)),
)
VALUES = st.one_of(st.none(), SCALARS, st.lists(SCALARS, max_size=4))
FIELDS = st.dictionaries(
    st.from_regex(r"[a-zA-Z][a-zA-Z0-9_ ]{0,12}", fullmatch=True), VALUES, max_size=5
)
VERSION_REFS = st.tuples(
    st.binary(min_size=32, max_size=32),
    st.integers(min_value=0, max_value=2**64 - 1),
    st.integers(min_value=1, max_value=2**64 - 1),
).map(list)
SCHEMAS = st.one_of(VERSION_REFS, st.sampled_from([YASMF, YAMF]))
INSTANCES = st.sampled_from([YASMF, YAMF, b"\x00\x20" + bytes(32)])


@st.composite
def instance_payloads(draw: st.DrawFn) -> bytes:
    """The CBOR of a create, an update or a delete (with or without its schema)."""
    kind = draw(st.sampled_from(["create", "update", "delete"]))
    value: dict[str, object] = {"kind": kind}
    if kind != "delete" or draw(st.booleans()):
        value["schema"] = draw(SCHEMAS)
    if kind != "create":
        value["instance"] = draw(INSTANCES)
    if kind != "delete":
        fields = draw(FIELDS)
        if kind == "update" and not fields:
            fields = {"a": None}
        value["fields"] = fields
    return encode_cbor(value)


def identical(a: object, b: object) -> bool:
    """Equal down to each value's type and bits: NaN equals NaN, -0.0 differs from
    0.0, True from 1, a tuple from a list."""
    return pickle.dumps(a, protocol=pickle.HIGHEST_PROTOCOL) == pickle.dumps(
        b, protocol=pickle.HIGHEST_PROTOCOL
    )


@settings(max_examples=400, deadline=None)
@given(instance_payloads())
def test_an_unpacked_message_is_the_decoded_one(payload: bytes) -> None:
    decoded = decode_message(payload)
    packed = pack_message(decoded)
    assert packed is not None
    unpacked = unpack_message(packed)
    assert type(unpacked) is type(decoded)
    assert identical(unpacked, decoded)
    assert identical(message_of(packed, b"not read"), decoded)


def test_edge_values_keep_their_types_and_bits() -> None:
    fields = {"nan": float("nan"), "neg": -0.0, "yes": True, "one": 1, "big": 2**64 - 1}
    decoded = decode_message(encode_cbor({"kind": "create", "schema": YASMF, "fields": fields}))
    unpacked = unpack_message(pack_message(decoded) or b"")
    assert isinstance(unpacked, Create)
    values = dict(unpacked.fields)
    assert values["nan"] != values["nan"]
    assert str(values["neg"]) == "-0.0"
    assert values["yes"] is True and type(values["one"]) is int
    assert values["big"] == 2**64 - 1


def test_a_delete_keeps_whether_it_names_its_schema() -> None:
    for value in (
        {"kind": "delete", "instance": YASMF},
        {"kind": "delete", "instance": YASMF, "schema": [AUTHOR, 3, 2]},
    ):
        decoded = decode_message(encode_cbor(value))
        assert isinstance(decoded, Delete)
        assert unpack_message(pack_message(decoded) or b"") == decoded


def test_schema_messages_are_not_packed_and_are_decoded_from_their_payload() -> None:
    revert = encode_cbor({"kind": "schema-revert", "target": 1})
    assert pack_message(decode_message(revert)) is None
    assert message_of(None, revert) == SchemaRevert(1)
    migration = SchemaMigration(())
    assert pack_message(migration) is None


def test_a_payload_without_a_packed_message_that_does_not_decode_gives_its_reason() -> None:
    found = message_of(None, encode_cbor({"kind": "nothing"}))
    assert isinstance(found, P2pandaError)
    assert found.reason is Reason.UNKNOWN_KIND


class _RunsAProgram:
    def __reduce__(self) -> tuple[object, ...]:
        return (os.system, ("true",))


def test_a_packed_message_makes_no_object_but_values() -> None:
    """The columnar store may sit on shared storage: what it holds must not be a way to
    run code on the workers."""
    with pytest.raises(pickle.UnpicklingError, match="system"):
        unpack_message(pickle.dumps((0, None, (("a", _RunsAProgram()),))))
