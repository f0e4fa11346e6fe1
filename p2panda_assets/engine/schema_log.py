"""Folding a schema log into versions: each entry is a version, each version a lens.

The revert rule (S-REVERT-1, S-REVERT-2): `schema-revert` with target t at seq r restores the
state of version t, unless a revert message between t and r targets a version earlier
than t (then it is ignored, and its version equals the one before). An effective revert
makes the versions in (t, r) dead. An invalid schema entry freezes the schema at the last
valid version: it and every later entry of the log are rejected.

The alive versions form one line in which every version's lens is the lens of the alive
version before it plus its own migration (an effective revert to t follows t itself).
So migrating a message forward means applying the alive migrations after its version.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum

from p2panda_assets.engine.conversion import ConversionFailed, convert_raw
from p2panda_assets.engine.lens import EMPTY_LENS, FieldSpec, Lens, lens_from
from p2panda_assets.engine.validation import compile_validation, validates
from p2panda_assets.errors import P2pandaError, Reason, Rejection
from p2panda_assets.protocol.ids import format_schema_id
from p2panda_assets.protocol.messages import (
    FieldChange,
    Message,
    SchemaMeta,
    SchemaMigration,
    SchemaRevert,
    check_field_name,
    is_schema_message,
)


@dataclass(frozen=True, slots=True)
class SchemaVersion:
    """The state of a schema at one version (seq num of its log entry)."""

    seq: int
    hash: bytes
    message: SchemaMeta | SchemaMigration | SchemaRevert
    lens: Lens
    before: Lens  # the lens this version's message was applied to
    meta: SchemaMeta | None  # the meta in force at this version
    ignored_revert: bool = False

    @property
    def migration(self) -> SchemaMigration | None:
        return self.message if isinstance(self.message, SchemaMigration) else None


class VersionState(StrEnum):
    """What version v of a schema is (rule S-STANDING, docs/semantics.md)."""

    ALIVE = "alive"  # a valid version no revert cut out
    DEAD = "dead"  # a valid version a revert cut out (rule S-REVERT-1)
    REJECTED = "rejected"  # its entry was invalid, or came after one (rule S-FREEZE)
    UNKNOWN = "unknown"  # no entry at that seq num has arrived (yet)


@dataclass(frozen=True, slots=True)
class VersionStanding:
    """Version `seq` of a schema, as `SchemaHistory.version_state` answers (rule
    S-STANDING): its state, and what the callers need of it."""

    seq: int
    state: VersionState
    version: SchemaVersion | None = None  # alive or dead: the version, with its lens
    rejection: Rejection | None = None  # rejected: why its entry was

    @property
    def lens(self) -> Lens | None:
        """The lens of the version (alive or dead); None if it has none."""
        return None if self.version is None else self.version.lens

    def refusal(self, of: str = "", *, is_delete: bool = False) -> Rejection | None:
        """Why a message naming this version is rejected for good, or None: a rejected
        version (`rejected-version`, rule I-PENDING-1), or a dead one unless the message
        is a delete (`reverted-version`, rule I-DEAD). An unknown version is no refusal:
        it is waited for. `of`: the schema as the message should say it (" of <name>")."""
        if self.state is VersionState.REJECTED:
            assert self.rejection is not None
            why = self.rejection.reason
            return Rejection(
                Reason.REJECTED_VERSION, f"version {self.seq}{of} was rejected ({why})"
            )
        if self.state is VersionState.DEAD and not is_delete:
            return Rejection(Reason.REVERTED_VERSION, f"version {self.seq}{of} was reverted")
        return None


@dataclass(slots=True)
class SchemaHistory:
    """A schema log folded: its valid versions, the dead ones, and what was rejected."""

    author: bytes
    log_id: int
    versions: dict[int, SchemaVersion] = field(default_factory=dict)
    dead: set[int] = field(default_factory=set)
    rejected: dict[int, Rejection] = field(default_factory=dict)  # seq -> why
    entry_hashes: dict[int, bytes] = field(default_factory=dict)  # seq -> entry hash, all

    @property
    def schema_id(self) -> str:
        return format_schema_id(self.author, self.log_id)

    @property
    def latest(self) -> SchemaVersion | None:
        return self.versions[max(self.versions)] if self.versions else None

    @property
    def lens(self) -> Lens:
        latest = self.latest
        return EMPTY_LENS if latest is None else latest.lens

    @property
    def name(self) -> str | None:
        latest = self.latest
        return None if latest is None or latest.meta is None else latest.meta.name

    def version_state(self, seq: int) -> VersionStanding:
        """Rule S-STANDING (docs/semantics.md): what version `seq` of this schema is,
        alive, dead (a revert cut it out), rejected (with why) or unknown (not arrived),
        and the version itself where it is valid. The one place this is decided: the
        engine's resolver (`corpus.Catalog.resolve`), authoring (`instance_ops`) and
        `coordination.check` ask it."""
        version = self.versions.get(seq)
        if version is not None:
            state = VersionState.DEAD if seq in self.dead else VersionState.ALIVE
            return VersionStanding(seq, state, version=version)
        rejection = self.rejected.get(seq)
        if rejection is not None:
            return VersionStanding(seq, VersionState.REJECTED, rejection=rejection)
        return VersionStanding(seq, VersionState.UNKNOWN)

    def alive_after(self, version: int) -> Iterator[SchemaVersion]:
        """The alive versions after `version`, in order: the path a message migrates on."""
        for seq in sorted(self.versions):
            if seq > version and seq not in self.dead:
                yield self.versions[seq]


SchemaLogItem = tuple[int, bytes, Message | P2pandaError]
"""(seq, entry hash, decoded message or the decoding error) of one accepted entry."""


def fold_schema_log(author: bytes, log_id: int, items: Iterable[SchemaLogItem]) -> SchemaHistory:
    """Fold the accepted entries of a schema log, in seq order, into its history: each
    entry a version, each version a lens (rule S-VERSION, docs/semantics.md); the
    first invalid entry freezes it (rule S-FREEZE)."""
    history = SchemaHistory(author, log_id)
    lens: Lens = EMPTY_LENS
    meta: SchemaMeta | None = None
    for seq, entry_hash, message in items:
        history.entry_hashes[seq] = entry_hash
        if history.rejected:
            history.rejected[seq] = Rejection(
                Reason.SCHEMA_FROZEN, f"schema frozen at version {max(history.versions, default=0)}"
            )
            continue
        try:
            version = _fold_one(history, seq, entry_hash, message, lens, meta)
        except P2pandaError as error:
            history.rejected[seq] = Rejection(error.reason, error.message)
            continue
        history.versions[seq] = version
        lens, meta = version.lens, version.meta
    return history


def _fold_one(
    history: SchemaHistory,
    seq: int,
    entry_hash: bytes,
    message: Message | P2pandaError,
    lens: Lens,
    meta: SchemaMeta | None,
) -> SchemaVersion:
    """The version one entry makes; a revert restores its target and kills the versions
    between (rule S-REVERT-1, docs/semantics.md), and targets an earlier valid version
    (rule S-REVERT-3)."""
    if isinstance(message, P2pandaError):
        raise message
    if not is_schema_message(message):
        raise P2pandaError(Reason.NOT_SCHEMA_MESSAGE, f"a {message.kind} message on a schema log")
    if isinstance(message, SchemaMeta):
        return SchemaVersion(seq, entry_hash, message, lens, lens, message)
    if isinstance(message, SchemaMigration):
        return SchemaVersion(
            seq, entry_hash, message, apply_migration(lens, message, seq), lens, meta
        )
    assert isinstance(message, SchemaRevert)
    target = message.target
    if not 1 <= target < seq or target not in history.versions:
        raise P2pandaError(
            Reason.BAD_REVERT_TARGET, f"revert target {target} is not an earlier version"
        )
    if _revert_is_ignored(history, target, seq):
        return SchemaVersion(seq, entry_hash, message, lens, lens, meta, ignored_revert=True)
    history.dead.update(range(target + 1, seq))
    restored = history.versions[target]
    return SchemaVersion(seq, entry_hash, message, restored.lens, lens, restored.meta)


def _revert_is_ignored(history: SchemaHistory, target: int, seq: int) -> bool:
    """Rule S-REVERT-2 (docs/semantics.md): a revert to t at r is ignored if a revert
    between t and r targets a version before t."""
    return any(
        isinstance(message := history.versions[s].message, SchemaRevert) and message.target < target
        for s in range(target + 1, seq)
    )


def apply_migration(lens: Lens, migration: SchemaMigration, seq: int) -> Lens:
    """The lens after `migration` (rule S-MIGRATE, docs/semantics.md), or `P2pandaError`
    with why the migration is invalid (rule S-INVALID). Names are compared exactly
    (rule M-CASE: `a` and `A` are two fields)."""
    names = [check_field_name(change.name, "field") for change in migration.fields]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise P2pandaError(Reason.DUPLICATE_FIELD_CHANGE, f"fields named twice: {duplicates}")
    fields = dict(lens)
    for change in migration.fields:
        if change.action == "create" and change.name in fields:
            raise P2pandaError(Reason.FIELD_EXISTS, f"field {change.name!r} already exists")
        if change.action != "create" and change.name not in fields:
            raise P2pandaError(Reason.FIELD_MISSING, f"field {change.name!r} does not exist")
        if change.action == "remove":
            del fields[change.name]
        else:
            fields[change.name] = field_spec(change, seq, fields.get(change.name))
    return lens_from(fields)


def field_spec(change: FieldChange, seq: int, previous: FieldSpec | None) -> FieldSpec:
    """The field a create or update change describes. An update describes the whole
    field anew (type, validation, relation), keeping only its incarnation. Its default
    converts and validates itself (rule S-DEFAULT-2, docs/semantics.md)."""
    assert change.type is not None
    validation = None
    if change.validation is not None:
        validation = compile_validation(change.validation)
    default = None
    if change.has_default:
        try:
            default = convert_raw(change.default, change.type)
        except (P2pandaError, ConversionFailed) as error:
            raise P2pandaError(
                Reason.BAD_DEFAULT, f"default of {change.name!r} is not a {change.type}"
            ) from error
        if not validates(default, change.type, validation):
            raise P2pandaError(
                Reason.BAD_DEFAULT, f"default of {change.name!r} fails its validation"
            )
    return FieldSpec(
        name=change.name,
        type=change.type,
        validation=change.validation,
        default=default,
        relation=change.schema,
        cascade=bool(change.cascade),
        created_at=seq if previous is None else previous.created_at,
    )
