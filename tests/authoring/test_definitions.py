"""Definition files: YAML and TOML as two forms of one structure, checked key by key."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from p2panda_assets.authoring.definitions import (
    field_change,
    load_definition,
    meta_message,
    migration_message,
)
from p2panda_assets.authoring.refs import schema_ref
from p2panda_assets.authoring.state import AuthorState, SchemaRecord
from p2panda_assets.engine.lens import EMPTY_LENS
from p2panda_assets.engine.schema_log import apply_migration
from p2panda_assets.errors import P2pandaError, Reason
from p2panda_assets.protocol.fieldtypes import FieldType
from p2panda_assets.protocol.keys import KeyPair
from p2panda_assets.protocol.log_writer import LogWriter
from p2panda_assets.protocol.messages import (
    ABSENT,
    FieldChange,
    SchemaLogRef,
    SchemaMeta,
    SchemaMigration,
    SchemaVersionRef,
    encode_message,
)
from tests.authoring.helpers import RESOURCES

KEY = KeyPair.from_private_key(bytes(range(32)))
HASH_HEX = "0020" + "ab" * 32


def author_with(*names: str) -> AuthorState:
    """An author state holding one-version schemas (a schema-meta each) of `names`."""
    me = AuthorState(KEY.public_key)
    for name in names:
        record = me.new_log("schema")
        me.schemas[name] = SchemaRecord(
            name, record.log_id, f"{KEY.public_key.hex()}-{record.log_id}"
        )
        payload = encode_message(SchemaMeta(name=name, spec=1))
        writer = LogWriter(KEY, record.log_id)
        writer.append(payload)
        record.hashes[1], record.payloads[1] = writer.hashes[1], payload
    return me


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_yaml_and_toml_are_one_structure(tmp_path: Path) -> None:
    me = author_with("profile")
    yaml_file = write(
        tmp_path,
        "d.yaml",
        """\
meta:
  description: Mail
fields:
  subject:
    type: text
    validation: '^[^#\\r\\n].*$'
    default: <Subject>
  created:
    type: timestamp
    default: 2020-05-22T11:58:50+00:00
  to:
    type: relation
    schema: profile
    cascade: true
""",
    )
    toml_file = write(
        tmp_path,
        "d.toml",
        """\
[meta]
description = "Mail"

[fields.subject]
type = "text"
validation = '^[^#\\r\\n].*$'
default = "<Subject>"

[fields.created]
type = "timestamp"
default = 2020-05-22T11:58:50+00:00

[fields.to]
type = "relation"
schema = "profile"
cascade = true
""",
    )
    built = []
    for path in (yaml_file, toml_file):
        definition = load_definition(path)
        built.append(
            (
                meta_message(me, "mail", definition.meta),
                migration_message(me, definition, EMPTY_LENS),
            )
        )
    assert built[0] == built[1]
    meta, migration = built[0]
    assert meta == SchemaMeta(name="mail", spec=1, description="Mail")
    subject, created, to = migration.fields
    assert subject.validation == "^[^#\\r\\n].*$" and subject.default == "<Subject>"
    assert created.default == datetime(2020, 5, 22, 11, 58, 50, tzinfo=UTC)
    assert to.schema == SchemaLogRef(KEY.public_key, 1) and to.cascade is True
    apply_migration(EMPTY_LENS, migration, 2)  # the engine accepts it


def test_the_seeds_resources_all_load() -> None:
    for path in sorted(RESOURCES.glob("*.yaml")) + sorted(RESOURCES.glob("*.toml")):
        assert load_definition(path).fields, path


def test_an_update_may_leave_out_the_type_and_the_relation() -> None:
    me = author_with("profile")
    created = field_change(
        me, "to", {"type": "relation[]", "schema": "profile", "cascade": True}, EMPTY_LENS, "f"
    )
    lens = apply_migration(EMPTY_LENS, migration_of(created), 2)
    update = field_change(me, "to", {"action": "update", "default": [HASH_HEX]}, lens, "f")
    assert update.type == FieldType.parse("relation[]")
    assert update.schema == SchemaLogRef(KEY.public_key, 1) and update.cascade is True
    assert update.default == (bytes.fromhex(HASH_HEX),)


def migration_of(*changes: FieldChange) -> SchemaMigration:
    return SchemaMigration(tuple(changes))


@pytest.mark.parametrize(
    ("data", "ftype", "raw"),
    [
        ("2020-05-22T11:58:50+0000", "timestamp", datetime(2020, 5, 22, 11, 58, 50, tzinfo=UTC)),
        (HASH_HEX, "relation", bytes.fromhex(HASH_HEX)),
        ("cafe", "blob", b"\xca\xfe"),
        (2, "float", 2.0),
        ("x", "text[]", ("x",)),
        (None, "integer", None),
    ],
)
def test_defaults_are_typed_values_made_raw(data: object, ftype: str, raw: object) -> None:
    spec = {"type": ftype, "default": data}
    if ftype.startswith("relation"):
        spec["schema"] = f"{'cd' * 32}-1"
    change = field_change(author_with(), "f", spec, EMPTY_LENS, "f")
    assert change.default == raw


def test_a_default_that_does_not_convert_is_a_bad_default() -> None:
    with pytest.raises(P2pandaError) as caught:
        field_change(
            author_with(),
            "n",
            {"type": "integer", "default": "many"},
            EMPTY_LENS,
            "x.yaml: fields.n",
        )
    assert caught.value.reason is Reason.BAD_DEFAULT and "x.yaml: fields.n" in caught.value.message


def test_without_default_the_change_has_none() -> None:
    assert field_change(author_with(), "n", {"type": "integer"}, EMPTY_LENS, "f").default is ABSENT


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"action": "remove", "type": "text"}, Reason.UNEXPECTED_KEY),
        ({"type": "text", "schema": "profile"}, Reason.UNEXPECTED_KEY),
        ({"type": "relation"}, Reason.MISSING_KEY),
        ({"action": "update", "type": "text"}, Reason.MISSING_KEY),
        ({"action": "rename"}, Reason.BAD_VALUE),
        ({"type": "string"}, Reason.UNKNOWN_TYPE),
        ({"type": "relation", "schema": "nobody"}, Reason.UNKNOWN_SCHEMA),
        ({"type": "relation", "schema": "profile", "cascade": "yes"}, Reason.BAD_TYPE),
    ],
)
def test_malformed_changes(change: dict, reason: Reason) -> None:
    with pytest.raises(P2pandaError) as caught:
        field_change(author_with("profile"), "f", change, EMPTY_LENS, "f")
    assert caught.value.reason is reason


def test_schema_refs_by_name_id_and_version() -> None:
    me = author_with("profile", "odd@name")
    author = KEY.public_key
    assert schema_ref(me, "profile") == SchemaLogRef(author, 1)
    assert schema_ref(me, "profile@3") == SchemaVersionRef(author, 1, 3)
    assert schema_ref(me, "profile", versioned=True) == SchemaVersionRef(author, 1, 1)
    assert schema_ref(me, "odd@name") == SchemaLogRef(author, 2)
    other = "cd" * 32
    assert schema_ref(me, f"{other}-9") == SchemaLogRef(bytes.fromhex(other), 9)
    assert schema_ref(me, f"{other}-9@2") == SchemaVersionRef(bytes.fromhex(other), 9, 2)
    assert schema_ref(me, [other, 9, 2]) == SchemaVersionRef(bytes.fromhex(other), 9, 2)
    with pytest.raises(P2pandaError):
        schema_ref(me, f"{other}-9", versioned=True)


def test_meta_merges_over_the_meta_in_force(tmp_path: Path) -> None:
    me = author_with("profile")
    base = SchemaMeta(name="mail", spec=1, description="old", homepage="https://a", license="MIT")
    meta = meta_message(
        me,
        "mail",
        {"name": "ignored", "homepage": None, "description": "new", "dependencies": ["profile"]},
        base=base,
    )
    assert meta == SchemaMeta(
        name="mail",
        spec=1,
        description="new",
        license="MIT",
        dependencies=(SchemaVersionRef(KEY.public_key, 1, 1),),
    )


@pytest.mark.parametrize(
    ("name", "text", "reason"),
    [
        ("a.yaml", "- subject\n", Reason.BAD_INPUT),
        ("b.yaml", "fields: [subject]\n", Reason.BAD_INPUT),
        ("c.yaml", "fields:\n  subject: text\n", Reason.BAD_INPUT),
        ("d.yaml", "fields: {a: 1\n", Reason.BAD_INPUT),
        ("e.toml", "[fields.a\n", Reason.BAD_INPUT),
        ("f.txt", "fields: {}\n", Reason.BAD_INPUT),
        ("g.yaml", "field:\n  a:\n    type: text\n", Reason.UNKNOWN_KEY),
    ],
)
def test_malformed_files(tmp_path: Path, name: str, text: str, reason: Reason) -> None:
    with pytest.raises(P2pandaError) as caught:
        load_definition(write(tmp_path, name, text))
    assert caught.value.reason is reason
    assert name in caught.value.message


def test_a_missing_file_is_unreadable(tmp_path: Path) -> None:
    with pytest.raises(P2pandaError) as caught:
        load_definition(tmp_path / "nope.yaml")
    assert caught.value.reason is Reason.UNREADABLE_FILE


@pytest.mark.parametrize("column", ["tableoid", "xmin", "cmin", "xmax", "cmax", "ctid"])
@pytest.mark.parametrize("suffix", ["yaml", "toml"])
def test_a_system_column_name_is_a_bad_field_name_before_publishing(
    tmp_path: Path, column: str, suffix: str
) -> None:
    text = (
        f"fields:\n  subject:\n    type: text\n  {column}:\n    type: text\n"
        if suffix == "yaml"
        else f'[fields.subject]\ntype = "text"\n[fields.{column}]\ntype = "text"\n'
    )
    with pytest.raises(P2pandaError) as caught:
        load_definition(write(tmp_path, f"mail.{suffix}", text))
    assert caught.value.reason is Reason.BAD_FIELD_NAME
    assert f"mail.{suffix}" in caught.value.message and column in caught.value.message


@pytest.mark.parametrize("name", ["_id", "", "new\nline"])
def test_other_bad_field_names_are_refused_when_the_file_is_read(tmp_path: Path, name: str) -> None:
    path = tmp_path / "mail.json"
    path.write_text(json.dumps({"fields": {name: {"type": "text"}}}))
    with pytest.raises(P2pandaError) as caught:
        load_definition(path)
    assert caught.value.reason is Reason.BAD_FIELD_NAME


def test_a_and_capital_a_in_a_definition_are_two_fields(tmp_path: Path) -> None:
    path = write(tmp_path, "cases.yaml", "fields:\n  a:\n    type: text\n  A:\n    type: integer\n")
    definition = load_definition(path)
    assert list(definition.fields) == ["a", "A"]
    migration = migration_message(author_with(), definition, EMPTY_LENS)
    assert migration is not None
    lens = apply_migration(EMPTY_LENS, migration, 2)
    assert [(n, str(s.type)) for n, s in lens.items()] == [("a", "text"), ("A", "integer")]
