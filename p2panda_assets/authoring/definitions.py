"""Definition files (docs/definitions.md): a schema's meta and field changes in YAML or TOML.

Both forms hold one structure, a `meta` table and a `fields` table of field name ->
change, so a schema author writes what `resources/` holds (`slothmail-001.yaml`,
`comment-001.toml`) instead of CBOR. Every key is checked against that structure
(`unknown-key`, naming the file and the key): a misspelt `valdiation` must not
silently publish a field without its validation, because a published migration can
only be reverted, never taken back.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from p2panda_assets.authoring.refs import schema_ref
from p2panda_assets.authoring.state import AuthorState
from p2panda_assets.authoring.values import raw_from_data
from p2panda_assets.engine.lens import Lens
from p2panda_assets.errors import P2pandaError, Reason
from p2panda_assets.protocol.fieldtypes import FieldType
from p2panda_assets.protocol.messages import (
    ABSENT,
    ACTIONS,
    FieldChange,
    FieldValue,
    SchemaMeta,
    SchemaMigration,
    SchemaVersionRef,
    _Absent,
    check_field_name,
)

TOP_KEYS = ("meta", "fields")
META_TEXT_KEYS = {
    "display-name": "display_name",
    "description": "description",
    "homepage": "homepage",
    "bugs": "bugs",
    "license": "license",
    "contact": "contact",
}
META_KEYS = ("name", "spec", *META_TEXT_KEYS, "dependencies")
CHANGE_KEYS = ("action", "type", "validation", "default", "schema", "cascade")
DEFAULT_SPEC = 1


@dataclass(frozen=True, slots=True)
class Definition:
    """A definition file, checked for shape: its meta table and its field changes."""

    path: str
    meta: dict[str, Any] | None
    fields: dict[str, dict[str, Any]]


# --------------------------------------------------------------------------- reading


def read_data(path: str | Path) -> object:
    """A YAML (`.yaml`, `.yml`), TOML (`.toml`) or JSON (`.json`) file's data."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".yaml", ".yml", ".toml", ".json"):
        raise P2pandaError(Reason.BAD_INPUT, f"{path}: expected a .yaml, .yml, .toml or .json file")
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise P2pandaError(Reason.UNREADABLE_FILE, f"{path}: {error.strerror}") from None
    try:
        if suffix == ".toml":
            return tomllib.loads(raw.decode("utf-8"))
        if suffix == ".json":
            return json.loads(raw)
        return yaml.safe_load(raw)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError, yaml.YAMLError, UnicodeError) as error:
        detail = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise P2pandaError(Reason.BAD_INPUT, f"{path}: not valid {suffix[1:]}: {detail}") from None


def load_definition(path: str | Path) -> Definition:
    """Read and shape-check a definition file (types, defaults and refs come later,
    against the schema they change)."""
    where = str(path)
    data = read_data(path)
    if data is None:
        data = {}
    top = _table(data, where)
    _check_keys(top, TOP_KEYS, where)
    meta = None
    if top.get("meta") is not None:
        meta = _table(top["meta"], f"{where}: meta")
        _check_keys(meta, META_KEYS, f"{where}: meta")
    fields: dict[str, dict[str, Any]] = {}
    for name, change in _table(top.get("fields") or {}, f"{where}: fields").items():
        field_where = f"{where}: fields.{name}"
        if not isinstance(name, str):
            raise P2pandaError(Reason.BAD_FIELD_NAME, f"{field_where}: a field name is text")
        check_field_name(name, f"{where}: field name")
        change = _table(change if change is not None else {}, field_where)
        _check_keys(change, CHANGE_KEYS, field_where)
        fields[name] = change
    return Definition(where, meta, fields)


def _table(value: object, where: str) -> dict[Any, Any]:
    if not isinstance(value, dict):
        raise P2pandaError(Reason.BAD_INPUT, f"{where} must be a mapping (a table)")
    return value


def _check_keys(table: Mapping[Any, Any], allowed: tuple[str, ...], where: str) -> None:
    for key in table:
        if key not in allowed:
            raise P2pandaError(
                Reason.UNKNOWN_KEY,
                f"{where} has unknown key {key!r} (allowed: {', '.join(allowed)})",
            )


# --------------------------------------------------------------------------- meta


def meta_message(
    me: AuthorState,
    name: str,
    table: Mapping[str, Any] | None,
    *,
    base: SchemaMeta | None = None,
    where: str = "meta",
) -> SchemaMeta:
    """The schema-meta for `name`: `base` (the meta in force) with the table's keys over
    it; a key set to null removes it. `name` always wins over the table's `name`."""
    table = table or {}
    text = {attr: getattr(base, attr) if base else None for attr in META_TEXT_KEYS.values()}
    for key, attr in META_TEXT_KEYS.items():
        if key in table:
            value = table[key]
            if value is not None and not isinstance(value, str):
                raise P2pandaError(Reason.BAD_TYPE, f"{where}.{key} must be text")
            text[attr] = value
    spec = table.get("spec", base.spec if base else DEFAULT_SPEC)
    if isinstance(spec, bool) or not isinstance(spec, int) or spec < 0:
        raise P2pandaError(Reason.BAD_VALUE, f"{where}.spec must be an unsigned integer")
    dependencies = base.dependencies if base else ()
    if "dependencies" in table:
        dependencies = _dependencies(me, table["dependencies"], where)
    return SchemaMeta(name=name, spec=spec, dependencies=dependencies, **text)


def _dependencies(me: AuthorState, items: object, where: str) -> tuple[SchemaVersionRef, ...]:
    if items is None:
        return ()
    if not isinstance(items, list):
        raise P2pandaError(Reason.BAD_TYPE, f"{where}.dependencies must be a list")
    refs = []
    for item in items:
        ref = schema_ref(me, item, versioned=True)
        if not isinstance(ref, SchemaVersionRef):
            raise P2pandaError(Reason.BAD_VALUE, f"{where}.dependencies: {item!r} needs a version")
        refs.append(ref)
    return tuple(refs)


# --------------------------------------------------------------------------- fields


def migration_message(
    me: AuthorState, definition: Definition, lens: Lens
) -> SchemaMigration | None:
    """The schema-migration of the file's `fields` against the current `lens` (None when
    the file changes no field)."""
    if not definition.fields:
        return None
    return SchemaMigration(
        tuple(
            field_change(me, name, change, lens, f"{definition.path}: fields.{name}")
            for name, change in definition.fields.items()
        )
    )


def field_change(
    me: AuthorState, name: str, change: Mapping[str, Any], lens: Lens, where: str
) -> FieldChange:
    """One field's change. An update may leave out `type` (and, for a relation, `schema`
    and `cascade`): they are taken from the field as it is now, as `slothmail-003.yaml`
    migration does; everything else an update does not give is dropped (rule P-DEFINITION)."""
    action = change.get("action", "create")
    if action not in ACTIONS:
        raise P2pandaError(Reason.BAD_VALUE, f"{where}.action must be create, update or remove")
    if action == "remove":
        extra = [key for key in change if key != "action"]
        if extra:
            raise P2pandaError(Reason.UNEXPECTED_KEY, f"{where} removes the field but has {extra}")
        return FieldChange(name, "remove")
    current = lens.get(name) if action == "update" else None
    ftype = _field_type(change, current.type if current else None, where)
    validation = change.get("validation")
    if validation is not None and not isinstance(validation, str):
        raise P2pandaError(Reason.BAD_TYPE, f"{where}.validation must be text")
    default: FieldValue | _Absent = ABSENT
    if "default" in change:
        default = _default(change["default"], ftype, where)
    elif action == "update":
        raise P2pandaError(Reason.MISSING_KEY, f"{where}: an update needs a default")
    schema, cascade = None, None
    if ftype.is_relation:
        inherit = current if current is not None and current.type.is_relation else None
        if "schema" in change:
            schema = schema_ref(me, change["schema"])
        elif inherit is not None:
            schema = inherit.relation
        else:
            raise P2pandaError(Reason.MISSING_KEY, f"{where}: a {ftype} field needs a schema")
        cascade = change.get(
            "cascade", inherit.cascade if inherit is not None and inherit.cascade else None
        )
        if cascade is not None and not isinstance(cascade, bool):
            raise P2pandaError(Reason.BAD_TYPE, f"{where}.cascade must be true or false")
    else:
        for key in ("schema", "cascade"):
            if key in change:
                raise P2pandaError(Reason.UNEXPECTED_KEY, f"{where} has {key!r} but is a {ftype}")
    return FieldChange(name, action, ftype, validation, default, schema, cascade)


def _field_type(change: Mapping[str, Any], current: FieldType | None, where: str) -> FieldType:
    if "type" not in change:
        if current is not None:
            return current
        raise P2pandaError(Reason.MISSING_KEY, f"{where} needs a type")
    text = change["type"]
    if not isinstance(text, str):
        raise P2pandaError(Reason.BAD_TYPE, f"{where}.type must be text")
    try:
        return FieldType.parse(text)
    except P2pandaError as error:
        raise P2pandaError(error.reason, f"{where}: {error.message}") from None


def _default(data: object, ftype: FieldType, where: str) -> FieldValue:
    try:
        return raw_from_data(data, ftype, f"{where}.default")
    except P2pandaError as error:
        raise P2pandaError(Reason.BAD_DEFAULT, error.message) from None
