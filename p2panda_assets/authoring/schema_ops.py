"""`panda schema NAME init|migrate|revert`: new entries on an own schema log, checked first.

Every new schema entry is folded with the log it extends, by the engine that readers run,
before anything is written: a migration the engine would reject (and so freeze the
schema at the version before, for good) is refused with the engine's reason instead.
`migrate --check` goes one step further without publishing: the class of the migration
(safe or lossy) and, against the entries published so far, how many values fall back.
`migrate` and `revert` say what they would do before they publish (`ChangePreview`): the
class, and against the store's entries how many instances they reject or change.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field

from p2panda_assets.authoring.definitions import Definition, meta_message, migration_message
from p2panda_assets.authoring.publish import Session
from p2panda_assets.authoring.refs import local_history
from p2panda_assets.authoring.state import LogRecord, SchemaRecord
from p2panda_assets.engine.compatibility import (
    Compatibility,
    Kind,
    classify,
    hidden_values,
    killed_versions,
    predict_fallbacks,
    revert_kind,
)
from p2panda_assets.engine.corpus import Corpus, Table, reduce_corpus
from p2panda_assets.engine.effect import DataEffect, data_effect
from p2panda_assets.engine.lens import EMPTY_LENS
from p2panda_assets.engine.schema_log import SchemaHistory
from p2panda_assets.errors import P2pandaError, Reason
from p2panda_assets.jsonlines import read_entry_lines
from p2panda_assets.protocol.ids import format_schema_id
from p2panda_assets.protocol.messages import (
    SchemaMessage,
    SchemaMeta,
    SchemaMigration,
    SchemaRevert,
)

Pairs = Sequence[tuple[bytes, bytes | None]]


@dataclass(frozen=True, slots=True)
class StoreView:
    """The store's entries (`pairs`), or None and why there are none to count against."""

    pairs: Pairs | None
    why_not: str = ""


NO_STORE = StoreView(None, "no store was asked: no counts")


@dataclass(frozen=True, slots=True)
class ChangePreview:
    """What publishing a migration or revert would do, said before it is: its class, and
    with the store's entries the effect on the data (else `why_no_counts`)."""

    what: str
    kind: Kind
    effect: DataEffect | None
    why_no_counts: str = ""
    killed: tuple[int, ...] = ()

    def lines(self) -> list[str]:
        head = f"{self.what} ({self.kind})"
        if self.effect is not None:
            return [f"{head}: {self.effect.text}"]
        return [head, f"note: {self.why_no_counts}"]

    @property
    def needs_yes(self) -> bool:
        return needs_confirmation(self.kind, self.effect)


def needs_confirmation(kind: Kind, effect: DataEffect | None) -> bool:
    """Rule P-CONFIRM (docs/semantics.md): publishing asks for `--yes` when rows would
    be rejected. Without counts every breaking revert asks: it rejects whatever the
    store holds at the versions it kills."""
    if effect is None:
        return kind is Kind.BREAKING
    return effect.rejects > 0


@dataclass(slots=True)
class SchemaOutcome:
    """What a schema command published: the schema, its new version, lines for people,
    and (migrate, revert) what it does to the data, for the command to confirm."""

    schema_id: str
    version: int
    notes: list[str] = field(default_factory=list)
    preview: ChangePreview | None = None

    @property
    def result(self) -> str:
        return f"{self.schema_id} version {self.version}"


def init_schema(
    session: Session,
    name: str | None,
    *,
    description: str | None = None,
    definition: Definition | None = None,
) -> SchemaOutcome:
    """A new schema log: a schema-meta at seq 1, then the file's fields as a migration."""
    me = session.me
    file_meta = dict(definition.meta or {}) if definition else {}
    file_name = file_meta.get("name")
    if name is None:
        if not isinstance(file_name, str):
            raise P2pandaError(Reason.BAD_NAME, "name the schema: `panda schema NAME init`")
        name = file_name
    if name in me.schemas:
        existing = me.schemas[name]
        raise P2pandaError(
            Reason.SCHEMA_EXISTS, f"schema {name!r} already exists here ({existing.schema_id})"
        )
    notes = []
    if isinstance(file_name, str) and file_name != name:
        notes.append(f"note: the file names the schema {file_name!r}; using {name!r}")
    if description is not None:
        file_meta["description"] = description
    where = f"{definition.path}: meta" if definition else "meta"
    messages: list[SchemaMessage] = [meta_message(me, name, file_meta, where=where)]
    if definition is not None:
        migration = migration_message(me, definition, EMPTY_LENS)
        if migration is not None:
            messages.append(migration)
    record = me.new_log("schema")
    schema_id = format_schema_id(me.author, record.log_id)
    me.schemas[name] = SchemaRecord(name, record.log_id, schema_id)
    version = _append_checked(session, record, messages)
    notes.append(f"Registered {name} schema at log {record.log_id}")
    notes += _describe(messages[1:])
    if version > 1:
        notes.append(f"Published {name} version {version}")
    return SchemaOutcome(schema_id, version, notes)


def migrate_schema(
    session: Session, name: str, definition: Definition, store: StoreView = NO_STORE
) -> SchemaOutcome:
    """A schema-meta (if the file has `meta`), then a schema-migration of its `fields`;
    with what it does to the data of `store` (nothing is committed here)."""
    record, history = _own_schema(session, name)
    first = len(session.published)
    messages = _migration_messages(session, name, definition, history)
    version = _append_checked(session, record, messages)
    after = local_history(session.me.author, record)
    kind = migration_compatibility(after, version).kind
    what = f"migrate to version {version}"
    preview = _preview(session, name, what, kind, store, first, history)
    notes = [*_describe(messages), f"Published {name} version {version}"]
    return SchemaOutcome(session.me.schemas[name].schema_id, version, notes, preview)


def migration_compatibility(history: SchemaHistory, version: int) -> Compatibility:
    """The class of `version` of a folded log: its migration's, or safe for a meta alone."""
    migration = history.versions[version].migration
    if migration is None:
        return Compatibility(Kind.SAFE, ())
    return classify(history.versions[version].before, migration, history.versions[version].lens)


def _preview(
    session: Session,
    name: str,
    what: str,
    kind: Kind,
    store: StoreView,
    first: int,
    before: SchemaHistory,
) -> ChangePreview:
    """The class `kind` of the entries `session` published from index `first` on, and
    what they do to the store's data: its entries reduced as they are and with them."""
    after = local_history(session.me.author, session.me.logs[session.me.schemas[name].log_id])
    killed = tuple(killed_versions(before, after))
    if store.pairs is None:
        return ChangePreview(what, kind, None, store.why_not, killed)
    schema_id = session.me.schemas[name].schema_id
    local_end = max(before.entry_hashes, default=0)
    table = _stored_table(store.pairs, schema_id, name, local_end)
    if isinstance(table, str):
        return ChangePreview(what, kind, None, table, killed)
    new = [(p.entry, p.payload) for p in session.published[first:]]
    effect = data_effect(table, reduce_corpus([*store.pairs, *new]))
    return ChangePreview(what, kind, effect, killed=killed)


def _stored_table(pairs: Pairs, schema_id: str, name: str, local_end: int) -> Table | str:
    """The schema's table from the store's entries, or why it gives no counts: the store
    must hold the schema log up to the local log's end, or the new entry would not chain."""
    corpus = reduce_corpus(pairs)
    history = corpus.histories.get(schema_id)
    stored_end = max(history.entry_hashes, default=0) if history else 0
    if stored_end == 0:
        return f"the store holds no entries of the schema log of {name}: no counts"
    if stored_end != local_end:
        return (
            f"the store holds {name} up to version {stored_end}, the local log is at "
            f"{local_end}: no counts (ingest the schema log first)"
        )
    table = corpus.tables.get(schema_id)
    if table is None:
        why = corpus.pending.get(schema_id)
        detail = f"{why.reason}: {why.message}" if why else "it is not built"
        return f"{name} has no table from the store's entries ({detail}): no counts"
    return table


def _migration_messages(
    session: Session, name: str, definition: Definition, history: SchemaHistory
) -> list[SchemaMessage]:
    """The messages `migrate` publishes for a file (shared with `--check`, so the check
    judges exactly what would be published)."""
    messages: list[SchemaMessage] = []
    if definition.meta is not None:
        base = history.latest.meta if history.latest else None
        meta = meta_message(
            session.me, name, definition.meta, base=base, where=f"{definition.path}: meta"
        )
        messages.append(meta)
    migration = migration_message(session.me, definition, history.lens)
    if migration is not None:
        messages.append(migration)
    if not messages:
        raise P2pandaError(Reason.BAD_INPUT, f"{definition.path} has no meta and no fields")
    return messages


@dataclass(frozen=True, slots=True)
class StoreEffect:
    """What a migration would do to the instances some entries hold: per updated field
    how many live rows fall back at this migration (`fallbacks`), and the count the
    table would then report (`table_fallbacks`, `Table.fallbacks`, which also counts
    fallbacks of earlier migrations); per removed field how many rows it hides."""

    rows: int
    fallbacks: dict[str, int]
    table_fallbacks: dict[str, int]
    hidden: dict[str, int]


@dataclass(slots=True)
class MigrationCheck:
    """What `panda schema NAME migrate --check FILE` found, without publishing: the
    class of the migration the file would publish as `version`, and (with entries)
    what it would do to the values they hold."""

    schema_id: str
    version: int
    compatibility: Compatibility
    effect: StoreEffect | None = None
    notes: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        """`safe` or `lossy`, a line per field change, then the counts."""
        lines = [str(self.compatibility.kind), *(c.line for c in self.compatibility.changes)]
        effect = self.effect
        if effect is not None:
            lines += [
                f"fallbacks {name}: {count} of {effect.rows} rows fall back to the default"
                f" (the table would count {effect.table_fallbacks.get(name, 0)})"
                for name, count in effect.fallbacks.items()
            ]
            lines += [
                f"hidden {name}: {count} of {effect.rows} rows hold a value it hides"
                for name, count in effect.hidden.items()
            ]
        return lines


def check_migration(
    session: Session, name: str, definition: Definition, entries: Sequence[str] = ()
) -> MigrationCheck:
    """The class of the migration `migrate` would publish from `definition`, and, given
    JSON-lines files of the entries published so far, how many of their values would
    fall back.

    The entries are signed exactly as `migrate` would sign them, on a copy of the
    authoring state, and never committed: `session` is left as it was. With entries,
    the corpus is reduced by the engine twice, as it is and with the new entries
    appended, so the counts are the ones readers will get, not an estimate."""
    trial = Session(session.home, session.key, copy.deepcopy(session.state))
    record, history = _own_schema(trial, name)
    before_seq = record.next_seq - 1
    messages = _migration_messages(trial, name, definition, history)
    version = _append_checked(trial, record, messages)
    after = local_history(trial.me.author, record)
    migration = after.versions[version].migration
    compatibility = migration_compatibility(after, version)
    schema_id = trial.me.schemas[name].schema_id
    check = MigrationCheck(schema_id, version, compatibility)
    if migration is None:
        check.notes.append(f"note: {definition.path} changes no field")
    if entries:
        new = [(p.entry, p.payload) for p in trial.published]
        check.effect = _store_effect(check, name, entries, new, before_seq)
    check.notes.append(f"Checked {name} version {version}; nothing was published")
    return check


def _store_effect(
    check: MigrationCheck,
    name: str,
    paths: Sequence[str],
    new: list[tuple[bytes, bytes]],
    before_seq: int,
) -> StoreEffect:
    items = list(read_entry_lines(paths))
    pairs = [item for item in items if isinstance(item, tuple)]
    bad = len(items) - len(pairs)
    if bad:
        check.notes.append(f"note: skipped {bad} lines that are not entries")
    where = ", ".join(paths)
    before = _table_at(reduce_corpus(pairs), check.schema_id, name, before_seq, where)
    after_corpus = reduce_corpus([*pairs, *new])
    after = _table_at(after_corpus, check.schema_id, name, check.version, where)
    removed = [c.name for c in check.compatibility.changes if c.action == "remove"]
    return StoreEffect(
        rows=len(before.rows),
        fallbacks=predict_fallbacks(before, after_corpus.histories[check.schema_id]),
        table_fallbacks=dict(after.fallbacks),
        hidden=hidden_values(before, removed),
    )


def _table_at(corpus: Corpus, schema_id: str, name: str, version: int, where: str) -> Table:
    """The schema's table in `corpus`, which must hold its log up to exactly `version`
    (the local log's end): counts against an older cut would be of another schema."""
    history = corpus.histories.get(schema_id)
    if history is None or history.latest is None:
        raise P2pandaError(
            Reason.UNKNOWN_SCHEMA, f"{where} holds no entries of the schema log of {name}"
        )
    if history.latest.seq != version:
        raise P2pandaError(
            Reason.BAD_INPUT,
            f"{where} holds {name} up to version {history.latest.seq}, the local log is at "
            f"{version}: give the entries of its whole log",
        )
    table = corpus.tables.get(schema_id)
    if table is None:
        why = corpus.pending.get(schema_id)
        reason = why.reason if why else Reason.AWAITING_SCHEMA
        detail = why.message if why else "it is not built"
        raise P2pandaError(reason, f"{name} has no table from {where}: {detail}")
    return table


def revert_schema(
    session: Session, name: str, target: int, store: StoreView = NO_STORE
) -> SchemaOutcome:
    """A schema-revert restoring version `target`; with what it does to the data of
    `store` (nothing is committed here)."""
    record, before = _own_schema(session, name)
    first = len(session.published)
    version = _append_checked(session, record, [SchemaRevert(target)])
    history = local_history(session.me.author, record)
    kind = revert_kind(before, history)
    preview = _preview(session, name, f"revert to version {target}", kind, store, first, before)
    notes = []
    if history.versions[version].ignored_revert:
        notes.append(
            f"note: an earlier revert between {target} and {version} targets a version before "
            f"{target}, so this revert changes nothing"
        )
    notes.append(f"Published {name} version {version} (reverted to version {target})")
    return SchemaOutcome(session.me.schemas[name].schema_id, version, notes, preview)


def _own_schema(session: Session, name: str) -> tuple[LogRecord, SchemaHistory]:
    schema = session.me.schemas.get(name)
    if schema is None:
        raise P2pandaError(
            Reason.UNKNOWN_SCHEMA,
            f"no local schema named {name!r}: create it with `panda schema {name} init`",
        )
    record = session.me.logs[schema.log_id]
    return record, local_history(session.me.author, record)


def _append_checked(session: Session, record: LogRecord, messages: list[SchemaMessage]) -> int:
    """Append `messages` and fold the log with them; refuse if the engine rejects any.
    Returns the last new version."""
    first = record.next_seq
    for message in messages:
        session.append(record, message)
    history = local_history(session.me.author, record)
    for seq in range(first, record.next_seq):
        rejection = history.rejected.get(seq)
        if rejection is not None:
            kind = messages[seq - first].kind
            raise P2pandaError(
                rejection.reason,
                f"refusing to publish: the {kind} would be rejected as version {seq}: "
                f"{rejection.message}",
            )
    return record.next_seq - 1


def _describe(messages: list[SchemaMessage]) -> list[str]:
    """The summary of a migration (rule P-OUTPUT): `Created fields` / `- subject<text>`."""
    lines: list[str] = []
    for message in messages:
        if isinstance(message, SchemaMeta):
            lines.append(f"Set meta of {message.name}")
        elif isinstance(message, SchemaMigration):
            for action, title in (
                ("create", "Created"),
                ("update", "Updated"),
                ("remove", "Removed"),
            ):
                changes = [c for c in message.fields if c.action == action]
                if changes:
                    lines.append(f"{title} fields")
                    lines += [
                        f"- {c.name}" + (f"<{c.type}>" if c.type is not None else "")
                        for c in changes
                    ]
    return lines
