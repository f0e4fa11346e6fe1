"""`panda publish create|update|delete`: instance messages on the author's instance logs.

All instance messages of one author for one schema go into one log (rule I-ONE-LOG),
so the state maps each schema id to its instance log, opened at the author's next free
log id on first use. Values are checked at the version they name, as the engine will
check them, so a message it would reject (`unknown-field`, `invalid-value`,
`validation-failed`, `reverted-version`, an update of another log's instance) is
refused here instead of published.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from p2panda_assets.authoring.publish import Session
from p2panda_assets.authoring.refs import Schema, find_schema
from p2panda_assets.authoring.state import AuthorState, LogRecord
from p2panda_assets.authoring.values import (
    check_fields,
    freeze,
    raw_from_data,
    raw_from_text,
    raw_without_type,
)
from p2panda_assets.engine.lens import FieldSpec, Lens
from p2panda_assets.engine.schema_log import VersionState
from p2panda_assets.errors import P2pandaError, Reason
from p2panda_assets.protocol.hashing import is_hash
from p2panda_assets.protocol.messages import Create, Delete, FieldValue, Update


@dataclass(frozen=True, slots=True)
class FieldInput:
    """Field values as given: `--fields FILE` data, then `--field NAME=TEXT`, then `--null`."""

    data: Mapping[str, object] = field(default_factory=dict)
    texts: Sequence[tuple[str, str]] = ()
    nulls: Sequence[str] = ()

    def __bool__(self) -> bool:
        return bool(self.data or self.texts or self.nulls)


@dataclass(frozen=True, slots=True)
class InstanceOutcome:
    instance_id: bytes
    notes: list[str]

    @property
    def result(self) -> str:
        return self.instance_id.hex()


def create_instance(
    session: Session,
    schema_text: str,
    version: int | None,
    inputs: FieldInput,
    entries: Sequence[str] = (),
) -> InstanceOutcome:
    """A create at `version` (default: the latest the history knows)."""
    schema = find_schema(session.me, schema_text, entries)
    version = pick_version(schema, version)
    values = field_values(inputs, _lens(schema, version), version)
    record = _instance_log(session.me, schema)
    published = session.append(record, Create(schema.version_ref(version), tuple(values.items())))
    record.instances[published.hash.hex()] = False
    note = f"Created {schema.label} instance {published.hash.hex()} at version {version}"
    return InstanceOutcome(published.hash, [note])


def update_instance(
    session: Session,
    schema_text: str,
    instance_text: str,
    version: int | None,
    inputs: FieldInput,
    entries: Sequence[str] = (),
) -> InstanceOutcome:
    """An update of an instance this key created, in its schema's log."""
    schema = find_schema(session.me, schema_text, entries)
    instance = parse_instance_id(instance_text)
    record = _own_instance(session.me, instance, schema)
    version = pick_version(schema, version)
    if not inputs:
        raise P2pandaError(Reason.BAD_INPUT, "an update needs at least one --field")
    values = field_values(inputs, _lens(schema, version), version)
    session.append(record, Update(schema.version_ref(version), instance, tuple(values.items())))
    note = f"Updated {schema.label} instance {instance.hex()} at version {version}"
    return InstanceOutcome(instance, [note])


def delete_instance(
    session: Session,
    instance_text: str,
    schema_text: str | None,
    version: int | None,
    entries: Sequence[str] = (),
) -> InstanceOutcome:
    """A delete, in the log that created the instance; it names a schema version only
    when `--schema` or `--version` is given (the field is optional, rule M-SHAPE)."""
    instance = parse_instance_id(instance_text)
    schema = None
    if schema_text is not None:
        schema = find_schema(session.me, schema_text, entries)
    record = _own_instance(session.me, instance, schema)
    ref = None
    if schema is None and version is not None:
        assert record.schema_id is not None
        schema = find_schema(session.me, record.schema_id, entries)
    if schema is not None:
        ref = schema.version_ref(pick_version(schema, version, for_delete=True))
    session.append(record, Delete(instance, ref))
    record.instances[instance.hex()] = True
    return InstanceOutcome(instance, [f"Deleted instance {instance.hex()}"])


# --------------------------------------------------------------------------- checks


def pick_version(schema: Schema, version: int | None, *, for_delete: bool = False) -> int:
    """The version a message names: the given one, checked where the history is known
    (`SchemaHistory.version_state`, rule S-STANDING: an unknown version is
    `awaiting-version`, a rejected one `rejected-version`, a dead one
    `reverted-version`), or the latest known. Deletes may name a dead version (they
    apply regardless, rule I-DEAD)."""
    history = schema.history
    if version is not None and version < 1:
        raise P2pandaError(Reason.BAD_VALUE, "a schema version is a seq num, >= 1")
    if history is None:
        if version is None:
            raise P2pandaError(
                Reason.BAD_INPUT,
                f"schema {schema.label} was not authored here: give --version "
                "(or --entries FILE holding its schema log)",
            )
        return version
    if version is None:
        if schema.latest is None:
            raise P2pandaError(Reason.AWAITING_VERSION, f"{schema.label} has no valid version")
        return schema.latest
    standing = history.version_state(version)
    if standing.state is VersionState.UNKNOWN:
        raise P2pandaError(
            Reason.AWAITING_VERSION, f"{schema.label} has no version {version} (yet)"
        )
    refusal = standing.refusal(f" of {schema.label}", is_delete=for_delete)
    if refusal is not None:
        raise P2pandaError(refusal.reason, refusal.message)
    return version


def field_values(inputs: FieldInput, lens: Lens | None, version: int) -> dict[str, FieldValue]:
    """Rule P-REFUSE (docs/semantics.md): the raw values of a create or update, typed by
    the lens when it is known and checked against it as the engine will (unknown field,
    value type, validation), so nothing is published only to be rejected."""
    values: dict[str, FieldValue] = {}
    for name, data in inputs.data.items():
        if lens is None:
            values[name] = freeze(data)
        else:
            values[name] = raw_from_data(data, _spec(lens, name, version).type, f"field {name!r}")
    for name, text in inputs.texts:
        if text == "":
            values[name] = None
        elif lens is None:
            values[name] = raw_without_type(text)
        else:
            values[name] = raw_from_text(text, _spec(lens, name, version).type, name)
    for name in inputs.nulls:
        values[name] = None
    if lens is not None:
        check_fields(values, lens, version)
    return values


def parse_instance_id(text: str) -> bytes:
    try:
        instance = bytes.fromhex(text)
    except ValueError:
        raise P2pandaError(Reason.BAD_HEX, f"instance id {text[:70]!r} is not hex") from None
    if not is_hash(instance):
        raise P2pandaError(Reason.BAD_HASH, f"instance id {text[:70]!r} is not an entry hash")
    return instance


def _lens(schema: Schema, version: int) -> Lens | None:
    """The lens of `version` (picked: valid), None where the history is not known."""
    if schema.history is None:
        return None
    return schema.history.version_state(version).lens


def _spec(lens: Lens, name: str, version: int) -> FieldSpec:
    spec = lens.get(name)
    if spec is None:
        known = ", ".join(lens) or "none"
        raise P2pandaError(
            Reason.UNKNOWN_FIELD, f"version {version} has no field {name!r} (fields: {known})"
        )
    return spec


def _instance_log(me: AuthorState, schema: Schema) -> LogRecord:
    """This author's one instance log for `schema`, opened on first use."""
    record = me.instance_log(schema.schema_id)
    if record is None:
        record = me.new_log("instances", schema.schema_id)
        me.instance_logs[schema.schema_id] = record.log_id
    return record


def _own_instance(me: AuthorState, instance: bytes, schema: Schema | None) -> LogRecord:
    """The own log holding `instance`'s create; refuses what the engine would reject."""
    record = me.log_of_instance(instance)
    name = instance.hex()
    if record is None:
        raise P2pandaError(
            Reason.UNKNOWN_INSTANCE,
            f"instance {name} was not created by this key here (only an instance's author "
            "may change it)",
        )
    if schema is not None and record.schema_id != schema.schema_id:
        raise P2pandaError(
            Reason.WRONG_SCHEMA, f"instance {name} is an instance of {record.schema_id}"
        )
    if record.instances[name]:
        raise P2pandaError(Reason.INSTANCE_DELETED, f"instance {name} was deleted")
    return record
