"""Message codecs (rules M-*, docs/semantics.md): CBOR payloads <-> frozen dataclasses.

Three messages live on schema logs (`schema-meta`, `schema-migration`, `schema-revert`)
and three on instance logs (`create`, `update`, `delete`). Decoding checks the shape of a
message only: keys, CBOR types, ranges, names, type strings and hash forms. What a message
means against a schema's history (does the field exist, does the value fit its type, is
the validation valid RE2) is the schema engine's business.

Field values and defaults stay raw decoded CBOR values, restricted to the shapes a field
can hold (a scalar, null, or a flat array of non-null scalars); arrays become tuples so
every message is hashable and can be grouped, deduplicated and shipped between processes.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from functools import lru_cache
from typing import ClassVar, Literal, TypeAlias, TypeGuard, get_args

from p2panda_assets.errors import P2pandaError, Reason
from p2panda_assets.protocol.cbor import UNDECIDED, decode_cbor, decode_cbor_fast, encode_cbor
from p2panda_assets.protocol.fieldtypes import FieldType
from p2panda_assets.protocol.hashing import is_hash
from p2panda_assets.protocol.ids import AUTHOR_SIZE, MAX_U64, format_schema_id

SCHEMA_NAME_MAX = 64
FIELD_NAME_MAX_BYTES = 63


class _Absent(Enum):
    """Type of `ABSENT`; an enum member so it survives pickling as the same object."""

    ABSENT = "ABSENT"

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT = _Absent.ABSENT
"""A field change without a `default` key (distinct from None: null is a real default)."""

Action = Literal["create", "update", "remove"]
ACTIONS: tuple[str, ...] = get_args(Action)


# --------------------------------------------------------------------------- schema refs


@dataclass(frozen=True, slots=True)
class SchemaLogRef:
    """`[author, log-id]`: a schema as a whole, without a version (relation targets)."""

    author: bytes
    log_id: int

    @property
    def schema_id(self) -> str:
        return format_schema_id(self.author, self.log_id)


@dataclass(frozen=True, slots=True)
class SchemaVersionRef:
    """`[author, log-id, version]`: one version (seq num, >= 1) of a schema."""

    author: bytes
    log_id: int
    version: int

    @property
    def schema_id(self) -> str:
        return format_schema_id(self.author, self.log_id)

    @property
    def log_ref(self) -> SchemaLogRef:
        return SchemaLogRef(self.author, self.log_id)


@dataclass(frozen=True, slots=True)
class SchemaHashRef:
    """A schema version named by the entry hash of its schema log entry."""

    hash: bytes


VersionedSchema: TypeAlias = SchemaVersionRef | SchemaHashRef
SchemaRef: TypeAlias = SchemaLogRef | SchemaVersionRef | SchemaHashRef

Scalar: TypeAlias = bool | int | float | str | bytes | datetime
FieldValue: TypeAlias = Scalar | tuple[Scalar, ...] | None
"""A raw field value: null, a scalar, or an array (as a tuple) of non-null scalars."""


# --------------------------------------------------------------------------- messages


@dataclass(frozen=True, slots=True)
class SchemaMeta:
    """`schema-meta`: names and describes a schema; its dependencies are versioned."""

    kind: ClassVar[str] = "schema-meta"

    name: str
    spec: int
    display_name: str | None = None
    description: str | None = None
    homepage: str | None = None
    bugs: str | None = None
    license: str | None = None
    contact: str | None = None
    dependencies: tuple[VersionedSchema, ...] = ()


@dataclass(frozen=True, slots=True)
class FieldChange:
    """One field of a migration: create, update (type/validation, with a default) or remove."""

    name: str
    action: Action
    type: FieldType | None = None
    validation: str | None = None
    default: FieldValue | _Absent = ABSENT
    schema: SchemaRef | None = None
    cascade: bool | None = None

    @property
    def has_default(self) -> bool:
        return self.default is not ABSENT


@dataclass(frozen=True, slots=True)
class SchemaMigration:
    """`schema-migration`: one or more field changes, applied together."""

    kind: ClassVar[str] = "schema-migration"

    fields: tuple[FieldChange, ...]


@dataclass(frozen=True, slots=True)
class SchemaRevert:
    """`schema-revert`: restore the state of version `target`."""

    kind: ClassVar[str] = "schema-revert"

    target: int


@dataclass(frozen=True, slots=True)
class Create:
    """`create`: a new instance; its id is the hash of the entry holding this message."""

    kind: ClassVar[str] = "create"

    schema: VersionedSchema
    fields: tuple[tuple[str, FieldValue], ...] = ()

    @property
    def fields_dict(self) -> dict[str, FieldValue]:
        return dict(self.fields)


@dataclass(frozen=True, slots=True)
class Update:
    """`update`: new values for some fields of an instance, written at a schema version."""

    kind: ClassVar[str] = "update"

    schema: VersionedSchema
    instance: bytes
    fields: tuple[tuple[str, FieldValue], ...]

    @property
    def fields_dict(self) -> dict[str, FieldValue]:
        return dict(self.fields)


@dataclass(frozen=True, slots=True)
class Delete:
    """`delete`: remove an instance; the schema version is optional."""

    kind: ClassVar[str] = "delete"

    instance: bytes
    schema: VersionedSchema | None = None


SchemaMessage: TypeAlias = SchemaMeta | SchemaMigration | SchemaRevert
InstanceMessage: TypeAlias = Create | Update | Delete
Message: TypeAlias = SchemaMessage | InstanceMessage

SCHEMA_MESSAGE_TYPES: tuple[type[SchemaMessage], ...] = (SchemaMeta, SchemaMigration, SchemaRevert)
INSTANCE_MESSAGE_TYPES: tuple[type[InstanceMessage], ...] = (Create, Update, Delete)


def is_schema_message(message: Message) -> TypeGuard[SchemaMessage]:
    """True for messages that belong on a schema log."""
    return isinstance(message, SCHEMA_MESSAGE_TYPES)


def is_instance_message(message: Message) -> TypeGuard[InstanceMessage]:
    """True for messages that belong on an author's instance log."""
    return isinstance(message, INSTANCE_MESSAGE_TYPES)


# --------------------------------------------------------------------------- checks


def _fail(reason: Reason, message: str) -> P2pandaError:
    return P2pandaError(reason, message)


def _check_keys(
    value: Mapping[str, object], allowed: frozenset[str], required: tuple[str, ...], where: str
) -> None:
    """Unknown keys first (the map is invalid whatever else it says), then missing ones."""
    for key in value:
        if key not in allowed:
            raise _fail(Reason.UNKNOWN_KEY, f"{where} has unknown key {key!r}")
    for key in required:
        if key not in value:
            raise _fail(Reason.MISSING_KEY, f"{where} lacks required key {key!r}")


def _map(value: object, where: str) -> dict[str, object]:
    if type(value) is not dict:
        raise _fail(Reason.BAD_TYPE, f"{where} must be a map")
    return value


def _text(value: object, where: str) -> str:
    if type(value) is not str:
        raise _fail(Reason.BAD_TYPE, f"{where} must be a text string")
    return value


def _uint(value: object, where: str) -> int:
    """A CBOR uint: an int (not a bool) in 0 .. 2^64-1."""
    if type(value) is not int:
        raise _fail(Reason.BAD_TYPE, f"{where} must be an unsigned integer")
    if not 0 <= value <= MAX_U64:
        raise _fail(Reason.BAD_VALUE, f"{where} must be in 0..2^64-1, not {value}")
    return value


def _hash(value: object, where: str) -> bytes:
    if type(value) is not bytes:
        raise _fail(Reason.BAD_TYPE, f"{where} must be a byte string (a hash)")
    if not is_hash(value):
        raise _fail(Reason.BAD_HASH, f"{where} is not a YASMF or YAMF hash")
    return value


def _author(value: object, where: str) -> bytes:
    if type(value) is not bytes:
        raise _fail(Reason.BAD_TYPE, f"{where} author must be a byte string")
    if len(value) != AUTHOR_SIZE:
        raise _fail(
            Reason.BAD_VALUE, f"{where} author must be {AUTHOR_SIZE} bytes, not {len(value)}"
        )
    return value


def _schema_name(value: object) -> str:
    """A schema's `name`: 1..64 printable ASCII characters.
    Rule M-SCHEMA-NAME (docs/semantics.md)."""
    name = _text(value, "'name'")
    if not 1 <= len(name) <= SCHEMA_NAME_MAX or not (name.isascii() and name.isprintable()):
        raise _fail(Reason.BAD_NAME, "'name' must be 1..64 printable ASCII characters")
    return name


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")  # Unicode category Cc, exactly

RESERVED_FIELD_NAMES = frozenset({"tableoid", "xmin", "cmin", "xmax", "cmax", "ctid"})
"""PostgreSQL's system column names: a table cannot have a column of one of them. Names
are case-sensitive (columns are always quoted), so `CTID` is a field like any other."""


@lru_cache(maxsize=4096)
def valid_field_name(name: str) -> bool:
    """Rules M-FIELD-NAME, M-RESERVED-NAME: 1..63 bytes of UTF-8, no control characters,
    not starting with `_`, not a PostgreSQL system column name. Case-sensitive. (Cached:
    the same few names recur on every message of a schema.)"""
    size = len(name.encode("utf-8", "surrogatepass"))
    return (
        1 <= size <= FIELD_NAME_MAX_BYTES
        and not name.startswith("_")
        and name not in RESERVED_FIELD_NAMES
        and _CONTROL.search(name) is None
    )


def check_field_name(name: str, where: str) -> str:
    """`name` if it is a valid field name, else `bad-field-name` naming `where`."""
    if not valid_field_name(name):
        raise _fail(
            Reason.BAD_FIELD_NAME,
            f"{where} {name[:70]!r} must be 1..63 bytes, no control characters, not '_...',"
            f" not one of {', '.join(sorted(RESERVED_FIELD_NAMES))}",
        )
    return name


def _field_name(value: object, where: str) -> str:
    return check_field_name(_text(value, where), where)


_SCALAR_TYPES = frozenset({bool, int, float, str, bytes, datetime})


def _value(value: object, where: str) -> FieldValue:
    """A field value or default: null, a scalar, or a flat array of non-null scalars."""
    if value is None or type(value) in _SCALAR_TYPES:
        return value  # type: ignore[return-value]
    if type(value) is list:
        for element in value:
            if type(element) not in _SCALAR_TYPES:
                raise _fail(
                    Reason.BAD_TYPE,
                    f"{where} array elements must be non-null scalars, not {_cbor_kind(element)}",
                )
        return tuple(value)
    raise _fail(Reason.BAD_TYPE, f"{where} must be a scalar, null or array, not a map")


def _cbor_kind(value: object) -> str:
    if value is None:
        return "null"
    if type(value) is list:
        return "an array"
    if type(value) is dict:
        return "a map"
    return type(value).__name__


# --------------------------------------------------------------------------- schema refs


def _versioned_schema(value: object, where: str) -> VersionedSchema:
    """`[author, log-id, version]` or the bstr entry hash of a schema log entry."""
    if type(value) is bytes:
        return SchemaHashRef(_hash(value, where))
    if type(value) is not list:
        raise _fail(Reason.BAD_TYPE, f"{where} must be [author, log-id, version] or a hash")
    if len(value) != 3:
        raise _fail(Reason.BAD_VALUE, f"{where} must have 3 elements: author, log-id, version")
    return _version_ref(value, where)


def _schema_ref(value: object, where: str) -> SchemaRef:
    """A versioned schema, or `[author, log-id]` for the schema as a whole."""
    if type(value) is list and len(value) == 2:
        return SchemaLogRef(_author(value[0], where), _uint(value[1], f"{where} log-id"))
    if type(value) is list and len(value) != 3:
        raise _fail(
            Reason.BAD_VALUE, f"{where} must be [author, log-id], [author, log-id, version]"
        )
    return _versioned_schema(value, where)


def _version_ref(value: list[object], where: str) -> SchemaVersionRef:
    author = _author(value[0], where)
    log_id = _uint(value[1], f"{where} log-id")
    version = _uint(value[2], f"{where} version")
    if version < 1:
        raise _fail(Reason.BAD_VALUE, f"{where} version must be >= 1 (a seq num)")
    return SchemaVersionRef(author, log_id, version)


def _encode_schema_ref(ref: SchemaRef) -> object:
    if isinstance(ref, SchemaHashRef):
        return ref.hash
    if isinstance(ref, SchemaVersionRef):
        return [ref.author, ref.log_id, ref.version]
    return [ref.author, ref.log_id]


# --------------------------------------------------------------------------- schema messages

_META_TEXT_KEYS = (
    ("display-name", "display_name"),
    ("description", "description"),
    ("homepage", "homepage"),
    ("bugs", "bugs"),
    ("license", "license"),
    ("contact", "contact"),
)
_META_KEYS = frozenset(
    {"kind", "name", "spec", "dependencies", *(key for key, _ in _META_TEXT_KEYS)}
)


def _decode_meta(value: dict[str, object]) -> SchemaMeta:
    _check_keys(value, _META_KEYS, ("name", "spec"), "schema-meta")
    optional: dict[str, str] = {}
    for key, attribute in _META_TEXT_KEYS:
        if key in value:
            optional[attribute] = _text(value[key], repr(key))
    dependencies: tuple[VersionedSchema, ...] = ()
    if "dependencies" in value:
        items = value["dependencies"]
        if type(items) is not list:
            raise _fail(Reason.BAD_TYPE, "'dependencies' must be an array")
        dependencies = tuple(
            _versioned_schema(item, f"'dependencies'[{i}]") for i, item in enumerate(items)
        )
    return SchemaMeta(
        name=_schema_name(value["name"]),
        spec=_uint(value["spec"], "'spec'"),
        dependencies=dependencies,
        **optional,
    )


def _encode_meta(message: SchemaMeta) -> dict[str, object]:
    out: dict[str, object] = {"kind": message.kind, "name": message.name, "spec": message.spec}
    for key, attribute in _META_TEXT_KEYS:
        text = getattr(message, attribute)
        if text is not None:
            out[key] = text
    if message.dependencies:
        out["dependencies"] = [_encode_schema_ref(ref) for ref in message.dependencies]
    return out


_MIGRATION_KEYS = frozenset({"kind", "fields"})
_CHANGE_KEYS = frozenset({"name", "action", "type", "validation", "default", "schema", "cascade"})


def _decode_migration(value: dict[str, object]) -> SchemaMigration:
    _check_keys(value, _MIGRATION_KEYS, ("fields",), "schema-migration")
    changes = value["fields"]
    if type(changes) is not list:
        raise _fail(Reason.BAD_TYPE, "'fields' of a schema-migration must be an array")
    if not changes:
        raise _fail(Reason.BAD_VALUE, "'fields' of a schema-migration must not be empty")
    return SchemaMigration(
        tuple(_decode_change(change, f"'fields'[{i}]") for i, change in enumerate(changes))
    )


def _decode_change(raw: object, where: str) -> FieldChange:
    change = _map(raw, where)
    _check_keys(change, _CHANGE_KEYS, ("name", "action"), where)
    name = _field_name(change["name"], f"{where} 'name'")
    action = _text(change["action"], f"{where} 'action'")
    if action not in ACTIONS:
        raise _fail(Reason.BAD_VALUE, f"{where} 'action' must be create, update or remove")
    if action == "remove":
        for key in change:
            if key not in ("name", "action"):
                raise _fail(Reason.UNEXPECTED_KEY, f"{where} removes a field but has {key!r}")
        return FieldChange(name, "remove")
    return _decode_typed_change(change, name, action, where)  # type: ignore[arg-type]


def _decode_typed_change(
    change: dict[str, object], name: str, action: Action, where: str
) -> FieldChange:
    """A create or update: type required, default required for update, relation extras."""
    if "type" not in change:
        raise _fail(Reason.MISSING_KEY, f"{where} ({action}) lacks required key 'type'")
    field_type = FieldType.parse(_text(change["type"], f"{where} 'type'"))
    validation = None
    if "validation" in change:
        validation = _text(change["validation"], f"{where} 'validation'")
    default: FieldValue | _Absent = ABSENT
    if "default" in change:
        default = _value(change["default"], f"{where} 'default'")
    elif action == "update":
        raise _fail(Reason.MISSING_KEY, f"{where} (update) lacks required key 'default'")
    schema, cascade = _relation_keys(change, field_type, where)
    return FieldChange(name, action, field_type, validation, default, schema, cascade)


def _relation_keys(
    change: dict[str, object], field_type: FieldType, where: str
) -> tuple[SchemaRef | None, bool | None]:
    """`schema` is required exactly on relation types; `cascade` is allowed only there.
    Rule M-RELATION (docs/semantics.md)."""
    if not field_type.is_relation:
        for key in ("schema", "cascade"):
            if key in change:
                raise _fail(Reason.UNEXPECTED_KEY, f"{where} has {key!r} but is not a relation")
        return None, None
    if "schema" not in change:
        raise _fail(Reason.MISSING_KEY, f"{where} is a relation but lacks key 'schema'")
    schema = _schema_ref(change["schema"], f"{where} 'schema'")
    cascade = change.get("cascade")
    if cascade is not None and type(cascade) is not bool:
        raise _fail(Reason.BAD_TYPE, f"{where} 'cascade' must be a boolean")
    return schema, cascade


def _encode_change(change: FieldChange) -> dict[str, object]:
    out: dict[str, object] = {"name": change.name, "action": change.action}
    if change.type is not None:
        out["type"] = str(change.type)
    if change.validation is not None:
        out["validation"] = change.validation
    if change.default is not ABSENT:
        out["default"] = change.default
    if change.schema is not None:
        out["schema"] = _encode_schema_ref(change.schema)
    if change.cascade is not None:
        out["cascade"] = change.cascade
    return out


def _encode_migration(message: SchemaMigration) -> dict[str, object]:
    return {"kind": message.kind, "fields": [_encode_change(c) for c in message.fields]}


_REVERT_KEYS = frozenset({"kind", "target"})


def _decode_revert(value: dict[str, object]) -> SchemaRevert:
    _check_keys(value, _REVERT_KEYS, ("target",), "schema-revert")
    return SchemaRevert(_uint(value["target"], "'target'"))


def _encode_revert(message: SchemaRevert) -> dict[str, object]:
    return {"kind": message.kind, "target": message.target}


# --------------------------------------------------------------------------- instance messages


def _fields(raw: object, kind: str) -> tuple[tuple[str, FieldValue], ...]:
    fields = _map(raw, f"'fields' of a {kind}")
    return tuple(
        (_field_name(name, "field name"), _value(value, f"field {name!r}"))
        for name, value in fields.items()
    )


_CREATE_KEYS = frozenset({"kind", "schema", "fields"})


def _decode_create(value: dict[str, object]) -> Create:
    _check_keys(value, _CREATE_KEYS, ("schema", "fields"), "create")
    return Create(
        _versioned_schema(value["schema"], "'schema'"), _fields(value["fields"], "create")
    )


_UPDATE_KEYS = frozenset({"kind", "schema", "instance", "fields"})


def _decode_update(value: dict[str, object]) -> Update:
    _check_keys(value, _UPDATE_KEYS, ("schema", "instance", "fields"), "update")
    schema = _versioned_schema(value["schema"], "'schema'")
    instance = _hash(value["instance"], "'instance'")
    fields = _fields(value["fields"], "update")
    if not fields:
        raise _fail(Reason.BAD_VALUE, "'fields' of an update must not be empty")
    return Update(schema, instance, fields)


_DELETE_KEYS = frozenset({"kind", "schema", "instance"})


def _decode_delete(value: dict[str, object]) -> Delete:
    _check_keys(value, _DELETE_KEYS, ("instance",), "delete")
    schema = None
    if "schema" in value:
        schema = _versioned_schema(value["schema"], "'schema'")
    return Delete(_hash(value["instance"], "'instance'"), schema)


def _encode_create(message: Create) -> dict[str, object]:
    return {
        "kind": message.kind,
        "schema": _encode_schema_ref(message.schema),
        "fields": dict(message.fields),
    }


def _encode_update(message: Update) -> dict[str, object]:
    return {
        "kind": message.kind,
        "schema": _encode_schema_ref(message.schema),
        "instance": message.instance,
        "fields": dict(message.fields),
    }


def _encode_delete(message: Delete) -> dict[str, object]:
    out: dict[str, object] = {"kind": message.kind}
    if message.schema is not None:
        out["schema"] = _encode_schema_ref(message.schema)
    out["instance"] = message.instance
    return out


# --------------------------------------------------------------------------- entry points

_DECODERS: dict[str, Callable[[dict[str, object]], Message]] = {
    SchemaMeta.kind: _decode_meta,
    SchemaMigration.kind: _decode_migration,
    SchemaRevert.kind: _decode_revert,
    Create.kind: _decode_create,
    Update.kind: _decode_update,
    Delete.kind: _decode_delete,
}

_ENCODERS: dict[type, Callable[..., dict[str, object]]] = {
    SchemaMeta: _encode_meta,
    SchemaMigration: _encode_migration,
    SchemaRevert: _encode_revert,
    Create: _encode_create,
    Update: _encode_update,
    Delete: _encode_delete,
}


def decode_message(payload: bytes) -> Message:
    """Decode and shape-check one message payload; raises only `P2pandaError`.
    cbor2's C decoder first (`decode_cbor_fast`): a message it decodes and whose shape
    holds is the one `decode_cbor` gives; anything else is decoded again by
    `decode_cbor`, whose error is the reason. Rule M-SHAPE (docs/semantics.md)."""
    value = decode_cbor_fast(payload)
    if value is not UNDECIDED:
        try:
            return _message_of(value)
        except P2pandaError:
            pass  # decode_cbor says why: a CBOR reason comes before a shape's
    return _message_of(decode_cbor(payload))


def _message_of(value: object) -> Message:
    """The message a decoded payload holds, its shape checked."""
    if type(value) is not dict:
        raise _fail(Reason.BAD_TYPE, f"a message must be a CBOR map, not {_cbor_kind(value)}")
    if "kind" not in value:
        raise _fail(Reason.MISSING_KEY, "the message lacks required key 'kind'")
    kind = _text(value["kind"], "'kind'")
    decoder = _DECODERS.get(kind)
    if decoder is None:
        raise _fail(Reason.UNKNOWN_KIND, f"'kind' {kind[:40]!r} names no message kind")
    return decoder(value)


def encode_message(message: Message) -> bytes:
    """Encode a message (`kind` first); the bytes are checked by decoding them again.

    The check makes an invalid message (say a bad field name built by hand) fail here,
    with the reason a reader would give, instead of being published.
    """
    encoder = _ENCODERS.get(type(message))
    if encoder is None:
        raise _fail(Reason.BAD_TYPE, f"cannot encode {type(message).__name__} as a message")
    payload = encode_cbor(encoder(message))
    decode_message(payload)
    return payload
