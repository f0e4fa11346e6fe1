"""Message codecs: rules M-* (shapes, keys and reasons), round-trips and robustness."""

from __future__ import annotations

import contextlib
import pickle
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from p2panda_assets.errors import P2pandaError, Reason
from p2panda_assets.protocol.cbor import decode_cbor, encode_cbor
from p2panda_assets.protocol.fieldtypes import BaseType, FieldType
from p2panda_assets.protocol.messages import (
    ABSENT,
    INSTANCE_MESSAGE_TYPES,
    RESERVED_FIELD_NAMES,
    SCHEMA_MESSAGE_TYPES,
    Create,
    Delete,
    FieldChange,
    Message,
    SchemaHashRef,
    SchemaLogRef,
    SchemaMeta,
    SchemaMigration,
    SchemaRevert,
    SchemaVersionRef,
    Update,
    decode_message,
    encode_message,
    is_instance_message,
    is_schema_message,
)

AUTHOR = bytes(range(32))
HASH = b"\x00\x20" + bytes(range(100, 132))  # YASMF
YAMF_HASH = b"\x00\x40" + bytes(64)
VERSION = [AUTHOR, 7, 3]


def reason_of(value: object) -> Reason:
    """The reason decoding the CBOR encoding of `value` as a message fails with."""
    with pytest.raises(P2pandaError) as caught:
        decode_message(encode_cbor(value))
    assert caught.value.message  # every error says what is wrong
    return caught.value.reason


def create(**fields: object) -> dict[str, object]:
    return {"kind": "create", "schema": VERSION, "fields": fields}


def migration(*changes: object) -> dict[str, object]:
    return {"kind": "schema-migration", "fields": list(changes)}


def meta(**extra: object) -> dict[str, object]:
    return {"kind": "schema-meta", "name": "slothmail", "spec": 1, **extra}


# --------------------------------------------------------------------------- decoding each kind


def test_schema_meta_decodes_with_all_keys() -> None:
    message = decode_message(
        encode_cbor(
            meta(
                **{
                    "display-name": "Sloth mail",
                    "description": "mail for sloths",
                    "homepage": "https://example.org",
                    "bugs": "https://example.org/bugs",
                    "license": "AGPL-3.0",
                    "contact": "sloth@example.org",
                    "dependencies": [VERSION, HASH],
                }
            )
        )
    )
    assert message == SchemaMeta(
        name="slothmail",
        spec=1,
        display_name="Sloth mail",
        description="mail for sloths",
        homepage="https://example.org",
        bugs="https://example.org/bugs",
        license="AGPL-3.0",
        contact="sloth@example.org",
        dependencies=(SchemaVersionRef(AUTHOR, 7, 3), SchemaHashRef(HASH)),
    )


def test_schema_migration_decodes_each_action() -> None:
    message = decode_message(
        encode_cbor(
            migration(
                {"name": "subject", "action": "create", "type": "varchar", "default": None},
                {
                    "name": "subject",
                    "action": "update",
                    "type": "text",
                    "validation": "^[^#]",
                    "default": "<Subject>",
                },
                {"name": "reply_to", "action": "create", "type": "relation", "schema": VERSION},
                {"name": "old", "action": "remove"},
            )
        )
    )
    assert message == SchemaMigration(
        (
            FieldChange("subject", "create", FieldType(BaseType.VARCHAR), default=None),
            FieldChange("subject", "update", FieldType(BaseType.TEXT), "^[^#]", "<Subject>"),
            FieldChange(
                "reply_to",
                "create",
                FieldType(BaseType.RELATION),
                schema=SchemaVersionRef(AUTHOR, 7, 3),
            ),
            FieldChange("old", "remove"),
        )
    )


def test_schema_revert_decodes() -> None:
    assert decode_message(encode_cbor({"kind": "schema-revert", "target": 2})) == SchemaRevert(2)


def test_create_decodes_values_and_keeps_field_order() -> None:
    when = datetime(2020, 5, 22, 11, 58, 50, tzinfo=UTC)
    message = decode_message(
        encode_cbor(create(z="text", a=1, m=[1.5, 2.5], b=None, t=when, blob=b"\x00", ok=True))
    )
    assert isinstance(message, Create)
    assert message.schema == SchemaVersionRef(AUTHOR, 7, 3)
    assert [name for name, _ in message.fields] == ["z", "a", "m", "b", "t", "blob", "ok"]
    assert message.fields_dict["m"] == (1.5, 2.5)
    assert message.fields_dict["t"] == when


def test_create_may_have_no_fields() -> None:
    assert decode_message(encode_cbor(create())) == Create(SchemaVersionRef(AUTHOR, 7, 3), ())


def test_create_accepts_schema_hash_ref() -> None:
    message = decode_message(encode_cbor({"kind": "create", "schema": YAMF_HASH, "fields": {}}))
    assert message == Create(SchemaHashRef(YAMF_HASH))


def test_update_decodes() -> None:
    payload = {"kind": "update", "schema": HASH, "instance": HASH, "fields": {"a": "b"}}
    assert decode_message(encode_cbor(payload)) == Update(SchemaHashRef(HASH), HASH, (("a", "b"),))


def test_delete_schema_is_optional() -> None:
    assert decode_message(encode_cbor({"kind": "delete", "instance": HASH})) == Delete(HASH)
    with_schema = {"kind": "delete", "schema": VERSION, "instance": HASH}
    assert decode_message(encode_cbor(with_schema)) == Delete(HASH, SchemaVersionRef(AUTHOR, 7, 3))


def test_timestamp_values_arrive_as_tag1_too() -> None:
    payload = encode_cbor(create())[:-1] + bytes.fromhex("a1 6174 c1 1a514b67b0".replace(" ", ""))
    message = decode_message(payload)
    assert isinstance(message, Create)
    assert message.fields_dict == {"t": datetime(2013, 3, 21, 20, 4, tzinfo=UTC)}


# --------------------------------------------------------------------------- accepted edge cases


def test_null_default_differs_from_absent_default() -> None:
    with_null = decode_message(
        encode_cbor(migration({"name": "a", "action": "create", "type": "text", "default": None}))
    )
    without = decode_message(
        encode_cbor(migration({"name": "a", "action": "create", "type": "text"}))
    )
    assert isinstance(with_null, SchemaMigration) and isinstance(without, SchemaMigration)
    assert with_null.fields[0].default is None and with_null.fields[0].has_default
    assert without.fields[0].default is ABSENT and not without.fields[0].has_default
    assert with_null != without


def test_migration_naming_a_field_twice_is_left_to_the_engine() -> None:
    change = {"name": "a", "action": "remove"}
    message = decode_message(encode_cbor(migration(change, change)))
    assert isinstance(message, SchemaMigration)
    assert len(message.fields) == 2


def test_relation_field_may_name_schema_without_version_and_cascade() -> None:
    change = {
        "name": "parent",
        "action": "create",
        "type": "relation[]",
        "schema": [AUTHOR, 9],
        "cascade": True,
    }
    message = decode_message(encode_cbor(migration(change)))
    assert isinstance(message, SchemaMigration)
    assert message.fields[0].schema == SchemaLogRef(AUTHOR, 9)
    assert message.fields[0].cascade is True
    assert message.fields[0].type == FieldType(BaseType.RELATION, is_array=True)


def test_field_name_of_63_utf8_bytes_is_accepted() -> None:
    name = "ü" * 31 + "x"  # 63 bytes
    assert isinstance(decode_message(encode_cbor(create(**{name: 1}))), Create)


def test_schema_name_of_64_ascii_characters_is_accepted() -> None:
    assert isinstance(decode_message(encode_cbor(meta(name="n" * 64))), SchemaMeta)


def test_validation_is_kept_as_text_for_the_engine() -> None:
    change = {"name": "a", "action": "create", "type": "text", "validation": "(unclosed"}
    message = decode_message(encode_cbor(migration(change)))
    assert isinstance(message, SchemaMigration)
    assert message.fields[0].validation == "(unclosed"


def test_uint_upper_bound_is_accepted() -> None:
    assert decode_message(encode_cbor({"kind": "schema-revert", "target": 2**64 - 1})) == (
        SchemaRevert(2**64 - 1)
    )


# --------------------------------------------------------------------------- one test per reason


@pytest.mark.parametrize(
    "value", [[], "create", 1, None, bytes(3)], ids=["array", "text", "int", "null", "bytes"]
)
def test_message_must_be_a_map(value: object) -> None:
    assert reason_of(value) is Reason.BAD_TYPE


def test_message_requires_kind() -> None:
    assert reason_of({"name": "x", "spec": 1}) is Reason.MISSING_KEY


def test_kind_must_be_text() -> None:
    assert reason_of({"kind": 1}) is Reason.BAD_TYPE


@pytest.mark.parametrize("kind", ["schema", "Create", "", "blob"])
def test_unknown_kind_is_rejected(kind: str) -> None:
    assert reason_of({"kind": kind}) is Reason.UNKNOWN_KIND


@pytest.mark.parametrize(
    "value",
    [
        meta(extra=1),
        meta(display_name="x"),  # the key is "display-name"
        migration({"name": "a", "action": "remove"}) | {"name": "x"},
        {"kind": "schema-revert", "target": 1, "version": 2},
        create() | {"instance": HASH},
        {"kind": "update", "schema": VERSION, "instance": HASH, "fields": {"a": 1}, "x": 1},
        {"kind": "delete", "instance": HASH, "fields": {}},
        migration({"name": "a", "action": "create", "type": "text", "required": True}),
    ],
)
def test_keys_not_defined_for_the_kind_are_unknown(value: object) -> None:
    assert reason_of(value) is Reason.UNKNOWN_KEY


@pytest.mark.parametrize(
    "value",
    [
        {"kind": "schema-meta", "spec": 1},
        {"kind": "schema-meta", "name": "x"},
        {"kind": "schema-migration"},
        {"kind": "schema-revert"},
        {"kind": "create", "fields": {}},
        {"kind": "create", "schema": VERSION},
        {"kind": "update", "schema": VERSION, "fields": {"a": 1}},
        {"kind": "update", "instance": HASH, "fields": {"a": 1}},
        {"kind": "update", "schema": VERSION, "instance": HASH},
        {"kind": "delete", "schema": VERSION},
        migration({"action": "remove"}),
        migration({"name": "a"}),
    ],
)
def test_required_keys_are_missing(value: object) -> None:
    assert reason_of(value) is Reason.MISSING_KEY


def test_create_field_change_requires_type() -> None:
    assert reason_of(migration({"name": "a", "action": "create"})) is Reason.MISSING_KEY


def test_update_field_change_requires_type() -> None:
    change = {"name": "a", "action": "update", "default": 1}
    assert reason_of(migration(change)) is Reason.MISSING_KEY


def test_update_field_change_requires_default() -> None:
    change = {"name": "a", "action": "update", "type": "text"}
    assert reason_of(migration(change)) is Reason.MISSING_KEY


def test_relation_field_change_requires_schema() -> None:
    change = {"name": "a", "action": "create", "type": "relation"}
    assert reason_of(migration(change)) is Reason.MISSING_KEY


@pytest.mark.parametrize("key", ["type", "validation", "default", "schema", "cascade"])
def test_remove_field_change_allows_only_name_and_action(key: str) -> None:
    values = {"type": "text", "validation": ".", "default": None, "schema": VERSION}
    change = {"name": "a", "action": "remove", key: values.get(key, True)}
    assert reason_of(migration(change)) is Reason.UNEXPECTED_KEY


@pytest.mark.parametrize(("key", "value"), [("schema", VERSION), ("cascade", False)])
def test_schema_and_cascade_only_on_relation_types(key: str, value: object) -> None:
    change = {"name": "a", "action": "create", "type": "text", key: value}
    assert reason_of(migration(change)) is Reason.UNEXPECTED_KEY


@pytest.mark.parametrize(
    "value",
    [
        meta(name=1),
        meta(spec="1"),
        meta(spec=True),  # a bool is not an int
        meta(spec=1.0),
        meta(description=b"x"),
        meta(contact=None),
        meta(dependencies=VERSION[0]),
        meta(dependencies=[1]),
        {"kind": "schema-migration", "fields": {"a": 1}},
        migration("a"),
        migration({"name": 1, "action": "remove"}),
        migration({"name": "a", "action": 1}),
        migration({"name": "a", "action": "create", "type": ["text"]}),
        migration({"name": "a", "action": "create", "type": "text", "validation": 1}),
        migration({"name": "a", "action": "create", "type": "relation", "schema": 1}),
        migration(
            {"name": "a", "action": "create", "type": "relation", "schema": VERSION, "cascade": 1}
        ),
        {"kind": "schema-revert", "target": False},
        {"kind": "create", "schema": "x", "fields": {}},
        {"kind": "create", "schema": VERSION, "fields": []},
        {"kind": "create", "schema": [1, 2, 3], "fields": {}},
        {"kind": "create", "schema": [AUTHOR, "7", 3], "fields": {}},
        {"kind": "create", "schema": [AUTHOR, 7, None], "fields": {}},
        {"kind": "update", "schema": VERSION, "instance": HASH.hex(), "fields": {"a": 1}},
        {"kind": "delete", "instance": [HASH]},
    ],
)
def test_wrong_cbor_types_are_bad_type(value: object) -> None:
    assert reason_of(value) is Reason.BAD_TYPE


@pytest.mark.parametrize(
    "value",
    [{"k": 1}, [[1]], [1, None], [{"k": 1}]],
    ids=["map", "nested-array", "null-in-array", "map-in-array"],
)
def test_field_values_must_be_scalars_or_flat_arrays(value: object) -> None:
    assert reason_of(create(a=value)) is Reason.BAD_TYPE
    update = {"kind": "update", "schema": VERSION, "instance": HASH, "fields": {"a": value}}
    assert reason_of(update) is Reason.BAD_TYPE
    change = {"name": "a", "action": "update", "type": "text", "default": value}
    assert reason_of(migration(change)) is Reason.BAD_TYPE


@pytest.mark.parametrize(
    "value",
    [
        meta(spec=-1),
        {"kind": "schema-revert", "target": -5},
        {"kind": "create", "schema": [AUTHOR, 7, 0], "fields": {}},  # versions start at 1
        {"kind": "create", "schema": [AUTHOR, -1, 1], "fields": {}},
        {"kind": "create", "schema": [AUTHOR[:31], 7, 1], "fields": {}},  # author of 31 bytes
        {"kind": "create", "schema": [AUTHOR + b"\x00", 7, 1], "fields": {}},
        {"kind": "create", "schema": [AUTHOR, 7], "fields": {}},  # no version
        {"kind": "create", "schema": [AUTHOR, 7, 1, 1], "fields": {}},
        meta(dependencies=[[AUTHOR, 7]]),
        migration(),
        migration({"name": "a", "action": "rename"}),
        migration({"name": "a", "action": "create", "type": "relation", "schema": [AUTHOR]}),
        {"kind": "update", "schema": VERSION, "instance": HASH, "fields": {}},
    ],
)
def test_out_of_range_values_are_bad_value(value: object) -> None:
    assert reason_of(value) is Reason.BAD_VALUE


@pytest.mark.parametrize("name", ["", "n" * 65, "slöthmail", "tab\there", "del\x7f"])
def test_schema_name_must_be_1_to_64_printable_ascii(name: str) -> None:
    assert reason_of(meta(name=name)) is Reason.BAD_NAME


@pytest.mark.parametrize(
    "name",
    ["", "_id", "x" * 64, "ü" * 32, "new\nline", "nul\x00", "c1\x85control"],
    ids=["empty", "underscore", "64-bytes", "64-utf8-bytes", "newline", "nul", "c1-control"],
)
def test_field_names_must_be_1_to_63_bytes_without_control_or_leading_underscore(
    name: str,
) -> None:
    assert reason_of(create(**{name: 1})) is Reason.BAD_FIELD_NAME
    update = {"kind": "update", "schema": VERSION, "instance": HASH, "fields": {name: 1}}
    assert reason_of(update) is Reason.BAD_FIELD_NAME
    assert reason_of(migration({"name": name, "action": "remove"})) is Reason.BAD_FIELD_NAME


SYSTEM_COLUMNS = ["tableoid", "xmin", "cmin", "xmax", "cmax", "ctid"]


def test_the_reserved_field_names_are_postgresqls_system_columns() -> None:
    assert frozenset(SYSTEM_COLUMNS) == RESERVED_FIELD_NAMES


@pytest.mark.parametrize("name", SYSTEM_COLUMNS)
def test_postgresql_system_column_names_are_bad_field_names(name: str) -> None:
    created = {"name": name, "action": "create", "type": "text"}
    assert reason_of(migration(created)) is Reason.BAD_FIELD_NAME
    assert reason_of(migration({"name": name, "action": "remove"})) is Reason.BAD_FIELD_NAME
    assert reason_of(create(**{name: "x"})) is Reason.BAD_FIELD_NAME
    update = {"kind": "update", "schema": VERSION, "instance": HASH, "fields": {name: 1}}
    assert reason_of(update) is Reason.BAD_FIELD_NAME
    with pytest.raises(P2pandaError) as caught:
        encode_message(SchemaMigration((FieldChange(name, "create", FieldType.parse("text")),)))
    assert caught.value.reason is Reason.BAD_FIELD_NAME
    assert name in caught.value.message


@pytest.mark.parametrize("name", ["CTID", "Xmin", "ctid_", "my ctid", "oid"])
def test_names_that_only_resemble_system_columns_are_fields(name: str) -> None:
    decoded = decode_message(encode_cbor(migration({"name": name, "action": "remove"})))
    assert decoded == SchemaMigration((FieldChange(name, "remove"),))


def test_field_names_are_case_sensitive() -> None:
    text = FieldType.parse("text")
    both = SchemaMigration(
        (FieldChange("a", "create", text), FieldChange("A", "create", FieldType.parse("integer")))
    )
    assert decode_message(encode_message(both)) == both
    message = decode_message(encode_cbor(create(a="lower", A="upper")))
    assert isinstance(message, Create)
    assert message.fields == (("a", "lower"), ("A", "upper"))


@pytest.mark.parametrize("type_text", ["string", "Text", "text[][]", "int", "[]", ""])
def test_unknown_field_type_is_rejected(type_text: str) -> None:
    change = {"name": "a", "action": "create", "type": type_text}
    assert reason_of(migration(change)) is Reason.UNKNOWN_TYPE


@pytest.mark.parametrize(
    "value",
    [
        {"kind": "delete", "instance": b"\x00\x20" + bytes(31)},  # digest too short
        {"kind": "delete", "instance": b"\x01\x20" + bytes(32)},  # unknown algorithm
        {"kind": "delete", "instance": HASH + b"\x00"},  # trailing byte
        {"kind": "delete", "instance": b""},
        {"kind": "update", "schema": VERSION, "instance": bytes(34), "fields": {"a": 1}},
        {"kind": "create", "schema": bytes(32), "fields": {}},
        meta(dependencies=[b"\x00\x40" + bytes(32)]),
        migration({"name": "a", "action": "create", "type": "relation", "schema": bytes(34)}),
    ],
)
def test_hashes_must_be_yasmf_or_yamf(value: object) -> None:
    assert reason_of(value) is Reason.BAD_HASH


@pytest.mark.parametrize(
    ("hex_text", "reason"),
    [
        ("a2 64 6b696e64 66 637265617465 64 6b696e64 66 637265617465", Reason.CBOR_DUPLICATE_KEY),
        ("bf 64 6b696e64 66 637265617465 ff", Reason.CBOR_MALFORMED),
        ("a1 01 02", Reason.CBOR_NON_TEXT_KEY),
        ("a1 64 6b696e64 f7", Reason.CBOR_UNSUPPORTED),
        ("a1 64 6b696e64" + " 81" * 16 + " 80", Reason.CBOR_TOO_DEEP),
    ],
)
def test_cbor_errors_reach_the_caller_unchanged(hex_text: str, reason: Reason) -> None:
    with pytest.raises(P2pandaError) as caught:
        decode_message(bytes.fromhex(hex_text.replace(" ", "")))
    assert caught.value.reason is reason


def test_error_message_names_the_offending_key() -> None:
    with pytest.raises(P2pandaError) as caught:
        decode_message(encode_cbor(migration({"name": "a", "action": "update", "type": "text"})))
    assert "'default'" in caught.value.message
    with pytest.raises(P2pandaError) as caught:
        decode_message(encode_cbor(meta(colour="green")))
    assert "'colour'" in caught.value.message


# --------------------------------------------------------------------------- encoding


def test_encoding_writes_kind_first() -> None:
    for message in (
        SchemaRevert(1),
        Delete(HASH, SchemaVersionRef(AUTHOR, 1, 1)),
        Create(SchemaHashRef(HASH), (("a", 1),)),
    ):
        value = decode_cbor(encode_message(message))
        assert isinstance(value, dict)
        assert next(iter(value)) == "kind"


def test_encoding_omits_absent_optional_keys() -> None:
    value = decode_cbor(encode_message(SchemaMigration((FieldChange("a", "remove"),))))
    assert value == {"kind": "schema-migration", "fields": [{"name": "a", "action": "remove"}]}
    assert decode_cbor(encode_message(SchemaMeta("x", 1))) == meta(name="x")


def test_encoding_an_invalid_message_fails_with_the_readers_reason() -> None:
    with pytest.raises(P2pandaError) as caught:
        encode_message(Create(SchemaHashRef(HASH), (("_id", 1),)))
    assert caught.value.reason is Reason.BAD_FIELD_NAME
    with pytest.raises(P2pandaError) as caught:
        encode_message(Update(SchemaHashRef(HASH), HASH, ()))
    assert caught.value.reason is Reason.BAD_VALUE


def test_message_families_are_told_apart() -> None:
    assert all(is_schema_message(t.__new__(t)) for t in SCHEMA_MESSAGE_TYPES)  # type: ignore[arg-type]
    assert not any(is_instance_message(t.__new__(t)) for t in SCHEMA_MESSAGE_TYPES)  # type: ignore[arg-type]
    assert is_instance_message(Delete(HASH)) and not is_schema_message(Delete(HASH))
    assert {t.kind for t in SCHEMA_MESSAGE_TYPES + INSTANCE_MESSAGE_TYPES} == {
        "schema-meta",
        "schema-migration",
        "schema-revert",
        "create",
        "update",
        "delete",
    }


def test_schema_refs_give_their_schema_id() -> None:
    assert SchemaLogRef(AUTHOR, 7).schema_id == f"{AUTHOR.hex()}-7"
    assert SchemaVersionRef(AUTHOR, 7, 3).schema_id == f"{AUTHOR.hex()}-7"
    assert SchemaVersionRef(AUTHOR, 7, 3).log_ref == SchemaLogRef(AUTHOR, 7)


# --------------------------------------------------------------------------- properties

authors = st.binary(min_size=32, max_size=32)
uints = st.integers(min_value=0, max_value=2**64 - 1)
hashes = st.one_of(
    st.binary(min_size=32, max_size=32).map(lambda d: b"\x00\x20" + d),
    st.binary(min_size=64, max_size=64).map(lambda d: b"\x00\x40" + d),
)
version_refs = st.builds(SchemaVersionRef, authors, uints, st.integers(1, 2**64 - 1))
versioned = st.one_of(version_refs, st.builds(SchemaHashRef, hashes))
schema_refs = st.one_of(versioned, st.builds(SchemaLogRef, authors, uints))
field_names = st.text(
    st.characters(exclude_categories=("Cc", "Cs")), min_size=1, max_size=20
).filter(
    lambda n: not n.startswith("_") and len(n.encode()) <= 63 and n not in RESERVED_FIELD_NAMES
)
scalars = st.one_of(
    st.booleans(),
    st.integers(min_value=-(2**64), max_value=2**64 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=20),
    st.binary(max_size=20),
    st.datetimes(timezones=st.just(UTC)),
)
values = st.one_of(st.none(), scalars, st.lists(scalars, max_size=4).map(tuple))
field_maps = st.dictionaries(field_names, values, max_size=5).map(lambda d: tuple(d.items()))
optional_text = st.none() | st.text(max_size=20)
field_types = st.builds(FieldType, st.sampled_from(list(BaseType)), st.booleans())


@st.composite
def field_changes(draw: st.DrawFn) -> FieldChange:
    name = draw(field_names)
    action = draw(st.sampled_from(["create", "update", "remove"]))
    if action == "remove":
        return FieldChange(name, "remove")
    field_type = draw(field_types)
    default = draw(values) if action == "update" else draw(st.just(ABSENT) | values)
    schema = draw(schema_refs) if field_type.is_relation else None
    cascade = draw(st.none() | st.booleans()) if field_type.is_relation else None
    validation = draw(optional_text)
    return FieldChange(name, action, field_type, validation, default, schema, cascade)


messages = st.one_of(
    st.builds(
        SchemaMeta,
        name=st.text(
            st.characters(min_codepoint=0x20, max_codepoint=0x7E), min_size=1, max_size=64
        ),
        spec=uints,
        display_name=optional_text,
        description=optional_text,
        homepage=optional_text,
        bugs=optional_text,
        license=optional_text,
        contact=optional_text,
        dependencies=st.lists(versioned, max_size=3).map(tuple),
    ),
    st.builds(SchemaMigration, st.lists(field_changes(), min_size=1, max_size=4).map(tuple)),
    st.builds(SchemaRevert, uints),
    st.builds(Create, versioned, field_maps),
    st.builds(Update, versioned, hashes, field_maps.filter(bool)),
    st.builds(Delete, hashes, st.none() | versioned),
)


@settings(max_examples=300, deadline=None)
@given(messages)
def test_decode_inverts_encode_for_every_kind(message: Message) -> None:
    decoded = decode_message(encode_message(message))
    assert decoded == message
    assert hash(decoded) == hash(message)


@settings(max_examples=50, deadline=None)
@given(messages)
def test_messages_survive_pickling(message: Message) -> None:
    """Spark ships decoded messages between processes."""
    assert pickle.loads(pickle.dumps(message)) == message


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=96))
def test_arbitrary_bytes_raise_only_p2panda_errors(data: bytes) -> None:
    with contextlib.suppress(P2pandaError):
        decode_message(data)


message_keys = st.sampled_from(
    ["kind", "name", "spec", "fields", "target", "schema", "instance", "action", "type",
     "default", "cascade", "validation", "dependencies", "display-name", "x"]
)  # fmt: skip
kinds = st.sampled_from(
    ["schema-meta", "schema-migration", "schema-revert", "create", "update", "delete"]
)
loose_leaves = st.one_of(
    kinds,
    st.sampled_from(["create", "update", "remove", "text", "relation", "a", "_a", ""]),
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.just(AUTHOR),
    hashes,
    st.binary(max_size=3),
    st.floats(),
)
loose_values = st.recursive(
    loose_leaves,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(message_keys, inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=500, deadline=None)
@given(kinds, st.dictionaries(message_keys, loose_values, max_size=5))
def test_near_miss_messages_raise_only_p2panda_errors(kind: str, body: dict[str, object]) -> None:
    """Maps built from the real keys reach the validation branches random bytes never do."""
    try:
        payload = encode_cbor({"kind": kind, **body})
    except P2pandaError:
        return  # deeper than the codec allows
    try:
        message = decode_message(payload)
    except P2pandaError:
        return
    assert decode_message(encode_message(message)) == message
