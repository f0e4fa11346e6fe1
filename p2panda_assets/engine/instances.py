"""Reducing one author's instance log to instances (rules I-*, docs/semantics.md).

Messages apply in log order. A create makes an instance (its id is the entry hash); an
update or delete changes only an instance of the same author, in the same log. Each
message's values are checked strictly at the version it names (a value that does not
fit is a rejected message) and then migrated forward to the latest version.

A message that must wait (unknown schema or version) is pending, and holds back only the
later messages of its log that concern the same instance (its own, or the one it
creates): they wait with it, so they apply in log order once it does, and every other
instance of the log is reduced as usual. A delete never waits for them: the instance is
deleted, and the messages held for it are superseded. Nor does a delete wait for the
version it names when that names the log's own schema (deletes apply at any version,
rule I-DEAD); one that names a version hash not known yet cannot be told
apart from a message of another schema, so it waits like any other message. Once every
version has arrived nothing is held, and the reduction is that of plain log order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from p2panda_assets.engine.lens import Lens, Value
from p2panda_assets.engine.migrate import migrate_values
from p2panda_assets.engine.schema_log import SchemaHistory, VersionState
from p2panda_assets.engine.validation import validates
from p2panda_assets.engine.values import interpret
from p2panda_assets.errors import P2pandaError, Pending, Reason, Rejection
from p2panda_assets.protocol.messages import (
    Create,
    Delete,
    InstanceMessage,
    Message,
    SchemaVersionRef,
    Update,
    VersionedSchema,
    is_instance_message,
)


@dataclass(frozen=True, slots=True)
class Resolved:
    """A versioned schema reference resolved against the known schema logs."""

    history: SchemaHistory
    version: int


Resolver = Callable[[VersionedSchema], Resolved | Pending | Rejection]
"""A versioned schema reference -> its version, or what it waits for, or why it never
resolves (a rejected version)."""
OwnerLookup = Callable[[bytes], tuple[bytes, int] | None]
"""Entry hash of a create message anywhere -> (author, log id) holding it (or None)."""


@dataclass(slots=True)
class Instance:
    """An instance being reduced: its current values and who wrote each of them."""

    id: bytes
    author: bytes
    values: dict[str, Value]
    version: int
    seq: int
    created_by: bytes
    writers: dict[str, bytes] = field(default_factory=dict)  # field -> entry hash
    fell_back: set[str] = field(default_factory=set)  # fields whose value is a fallback
    messages: list[bytes] = field(default_factory=list)  # entry hashes, create first
    deleted_by: bytes | None = None  # the delete entry, or the upstream id (cascade)


@dataclass(slots=True)
class LogReduction:
    instances: dict[bytes, Instance] = field(default_factory=dict)
    rejected: dict[bytes, Rejection] = field(default_factory=dict)
    pending: dict[bytes, Pending] = field(default_factory=dict)  # with what it awaits
    deletes: list[bytes] = field(default_factory=list)  # applied delete entries
    # Messages held back for an instance that a delete then deleted: they never applied,
    # and never will change a row (a held create is the deleted instance's own message).
    superseded: list[bytes] = field(default_factory=list)
    # What holds each held instance back (instance id -> `_Hold`), kept with the rest so
    # that a reduction can go on with the log's later messages (`reduce_log`'s `start`).
    holds: dict[bytes, _Hold] = field(default_factory=dict)


LogItem = tuple[int, bytes, Message | P2pandaError]


@dataclass(slots=True)
class _Hold:
    """An instance held back by its first pending message: what that awaits, and every
    message of the instance pending since, in log order."""

    pending: Pending
    entries: list[bytes] = field(default_factory=list)
    create: tuple[int, bytes] | None = None  # (seq, entry hash) of its create, if held


def reduce_log(
    author: bytes,
    log_id: int,
    history: SchemaHistory,
    items: Iterable[LogItem],
    resolve: Resolver,
    owner_of: OwnerLookup,
    start: LogReduction | None = None,
) -> LogReduction:
    """Reduce the accepted entries (in seq order) of the log (author, log_id) of `history`.

    A pending message holds back only the later messages of its own instance (rule
    I-PENDING-2, docs/semantics.md; see the module docstring); a delete is never held
    back.

    With `start` (the reduction of the log's earlier entries, changed in place), the
    reduction goes on from there: the fold is one pass in log order that looks neither
    back nor ahead, so a log reduced in two parts is the log reduced whole."""
    reduction = LogReduction() if start is None else start
    holds = reduction.holds  # instance id -> what holds it back
    log = (author, log_id)
    for seq, entry_hash, message in items:
        if isinstance(message, P2pandaError):
            reduction.rejected[entry_hash] = Rejection(message.reason, message.message)
            continue
        if not is_instance_message(message):
            reduction.rejected[entry_hash] = Rejection(
                Reason.NOT_INSTANCE_MESSAGE, f"a {message.kind} message on an instance log"
            )
            continue
        instance_id = entry_hash if isinstance(message, Create) else message.instance
        hold = holds.get(instance_id)
        try:
            if isinstance(message, Delete):
                _delete(reduction, log, history, seq, entry_hash, message, resolve, owner_of, hold)
                if hold is not None:
                    del holds[instance_id]
            elif hold is not None:
                hold.entries.append(entry_hash)
                reduction.pending[entry_hash] = hold.pending
            else:
                _apply(reduction, log, history, seq, entry_hash, message, resolve, owner_of)
        except _HeldBack as held:
            if hold is None:
                hold = holds[instance_id] = _Hold(held.pending)
            hold.entries.append(entry_hash)
            if isinstance(message, Create):
                hold.create = (seq, entry_hash)
            reduction.pending[entry_hash] = held.pending
        except P2pandaError as error:
            reduction.rejected[entry_hash] = Rejection(error.reason, error.message)
    return reduction


class _HeldBack(Exception):
    """Raised with the `Pending` of a message that must wait (control flow only)."""

    def __init__(self, pending: Pending) -> None:
        self.pending = pending


def _apply(
    reduction: LogReduction,
    log: tuple[bytes, int],
    history: SchemaHistory,
    seq: int,
    entry_hash: bytes,
    message: Create | Update,
    resolve: Resolver,
    owner_of: OwnerLookup,
) -> None:
    """Apply a create or an update (raises `_HeldBack` or `P2pandaError` if it does not)."""
    version = _version_of(message, history, resolve)
    assert version is not None
    if isinstance(message, Create):
        reduction.instances[entry_hash] = _create(
            message, log[0], history, version, seq, entry_hash
        )
        return
    instance = _target(reduction, log, message.instance, owner_of)
    _update(instance, message, history, version, seq, entry_hash)


def _delete(
    reduction: LogReduction,
    log: tuple[bytes, int],
    history: SchemaHistory,
    seq: int,
    entry_hash: bytes,
    message: Delete,
    resolve: Resolver,
    owner_of: OwnerLookup,
    hold: _Hold | None,
) -> None:
    """Apply a delete, whatever is pending for its instance (rule I-PENDING-3,
    docs/semantics.md): the messages held for it are superseded. An instance whose
    create is held exists from now on only as deleted (so its id is in the deleted set
    that cascades read, and later messages naming it are rejected as they will be once
    its create applies)."""
    _version_of(message, history, resolve)
    own_create = None
    if hold is not None and hold.create is not None:
        create_seq, own_create = hold.create
        reduction.instances[own_create] = Instance(
            id=own_create,
            author=log[0],
            values={},
            version=0,  # the version its create names is not known yet
            seq=create_seq,
            created_by=own_create,
            messages=[own_create],  # accounted superseded, as the message of a deleted instance
            deleted_by=entry_hash,
        )
    else:
        _target(reduction, log, message.instance, owner_of).deleted_by = entry_hash
    reduction.deletes.append(entry_hash)
    for held in hold.entries if hold is not None else ():
        del reduction.pending[held]
        if held != own_create:
            reduction.superseded.append(held)


def _version_of(message: InstanceMessage, history: SchemaHistory, resolve: Resolver) -> int | None:
    """The version a message names, checked against its log's schema; None for a delete
    that names none. Deletes apply whatever version they name, even a dead one, and do
    not wait for a version of their own log's schema that is not known yet."""
    if message.schema is None:
        return None
    resolved = resolve(message.schema)
    if isinstance(resolved, Rejection):
        raise P2pandaError(resolved.reason, resolved.message)
    if isinstance(resolved, Pending):
        if isinstance(message, Delete) and isinstance(message.schema, SchemaVersionRef):
            _same_schema(message.schema.schema_id, history)
            return None
        raise _HeldBack(resolved)
    _same_schema(resolved.history.schema_id, history)
    refuse_dead_version(history, resolved.version, is_delete=isinstance(message, Delete))
    return resolved.version


def refuse_dead_version(history: SchemaHistory, version: int, *, is_delete: bool) -> None:
    """Rule I-DEAD (docs/semantics.md): a create or update that names a version a revert
    made dead is rejected (`reverted-version`); a delete applies whatever version it
    names. Authoring refuses such a message before publishing it by the same answer
    (`SchemaHistory.version_state`)."""
    standing = history.version_state(version)
    if standing.state is VersionState.DEAD:
        refusal = standing.refusal(is_delete=is_delete)
        if refusal is not None:
            raise P2pandaError(refusal.reason, refusal.message)


def _same_schema(schema_id: str, history: SchemaHistory) -> None:
    """Rule I-MIXED-LOG (docs/semantics.md): a message names its log's schema."""
    if schema_id != history.schema_id:
        raise P2pandaError(
            Reason.MIXED_LOG, f"log holds {history.schema_id}, message names {schema_id}"
        )


def typed_values(
    fields: Iterable[tuple[str, object]], lens: Lens, version: int
) -> dict[str, Value]:
    """Rule I-STRICT (docs/semantics.md): a message's values at the version it names,
    strictly: unknown fields, values that
    do not fit the type and values that fail validation reject the message. (Authoring
    calls this too, to refuse what the engine would reject before publishing it.)"""
    values: dict[str, Value] = {}
    for name, raw in fields:
        spec = lens.get(name)
        if spec is None:
            known = ", ".join(lens) or "none"
            raise P2pandaError(
                Reason.UNKNOWN_FIELD, f"version {version} has no field {name!r} (fields: {known})"
            )
        value = interpret(raw, spec.type)
        if not validates(value, spec.type, spec.compiled_validation):
            raise P2pandaError(
                Reason.VALIDATION_FAILED,
                f"field {name!r} fails its validation {spec.validation!r} at version {version}",
            )
        values[name] = value
    return values


def _create(
    message: Create,
    author: bytes,
    history: SchemaHistory,
    version: int | None,
    seq: int,
    entry_hash: bytes,
) -> Instance:
    """Rule I-CREATE (docs/semantics.md): the instance a create makes, its id its entry
    hash."""
    assert version is not None
    values = typed_values(message.fields, history.versions[version].lens, version)
    for name, spec in history.versions[version].lens.items():
        values.setdefault(name, spec.default)
    values, fell_back = migrate_values(values, version, history, is_create=True)
    return Instance(
        id=entry_hash,
        author=author,
        values=values,
        version=version,
        seq=seq,
        created_by=entry_hash,
        writers=dict.fromkeys(values, entry_hash),
        fell_back=fell_back,
        messages=[entry_hash],
    )


def _update(
    instance: Instance,
    message: Update,
    history: SchemaHistory,
    version: int,
    seq: int,
    entry_hash: bytes,
) -> None:
    values = typed_values(message.fields, history.versions[version].lens, version)
    values, fell_back = migrate_values(values, version, history, is_create=False)
    instance.values.update(values)
    for name in values:
        instance.writers[name] = entry_hash
        if name in fell_back:
            instance.fell_back.add(name)
        else:
            instance.fell_back.discard(name)
    instance.version, instance.seq = version, seq
    instance.messages.append(entry_hash)


def _target(
    reduction: LogReduction, log: tuple[bytes, int], instance_id: bytes, owner_of: OwnerLookup
) -> Instance:
    """The instance an update or delete names, if this log may change it: only its
    author, in the log of its create (rule I-NOT-AUTHOR, docs/semantics.md), and only
    while it is live (rule I-GONE)."""
    instance = reduction.instances.get(instance_id)
    if instance is None:
        owner = owner_of(instance_id)
        name = instance_id.hex()
        if owner is None:
            raise P2pandaError(Reason.UNKNOWN_INSTANCE, f"no instance {name}")
        if owner[0] != log[0]:
            raise P2pandaError(Reason.NOT_AUTHOR, f"instance {name} has another author")
        if owner[1] != log[1]:
            raise P2pandaError(Reason.WRONG_SCHEMA, f"instance {name} is in another log")
        raise P2pandaError(Reason.UNKNOWN_INSTANCE, f"the create of {name} was rejected")
    if instance.deleted_by is not None:
        raise P2pandaError(Reason.INSTANCE_DELETED, f"instance {instance_id.hex()} was deleted")
    return instance
