"""`panda schema NAME init|migrate|revert`: new entries on an own schema log, checked first.

Every new schema entry is folded with the log it extends, by the engine that readers run,
before anything is written: a migration the engine would reject (and so freeze the
schema at the version before, for good) is refused with the engine's reason instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from p2panda_assets.authoring.definitions import Definition, meta_message, migration_message
from p2panda_assets.authoring.publish import Session
from p2panda_assets.authoring.refs import local_history
from p2panda_assets.authoring.state import LogRecord, SchemaRecord
from p2panda_assets.engine.lens import EMPTY_LENS
from p2panda_assets.engine.schema_log import SchemaHistory
from p2panda_assets.errors import P2pandaError, Reason
from p2panda_assets.protocol.messages import (
    SchemaMessage,
    SchemaMeta,
    SchemaMigration,
    SchemaRevert,
)


@dataclass(slots=True)
class SchemaOutcome:
    """What a schema command published: the schema, its new version, lines for people."""

    schema_id: str
    version: int
    notes: list[str] = field(default_factory=list)

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
        record = me.schemas[name]
        raise P2pandaError(
            Reason.SCHEMA_EXISTS, f"schema {name!r} already exists here ({record.schema_id})"
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
    schema_id = f"{me.author.hex()}-{record.log_id}"
    me.schemas[name] = SchemaRecord(name, record.log_id, schema_id)
    version = _append_checked(session, record, messages)
    notes.append(f"Registered {name} schema at log {record.log_id}")
    notes += _describe(messages[1:])
    if version > 1:
        notes.append(f"Published {name} version {version}")
    return SchemaOutcome(schema_id, version, notes)


def migrate_schema(session: Session, name: str, definition: Definition) -> SchemaOutcome:
    """A schema-meta (if the file has `meta`), then a schema-migration of its `fields`."""
    record, history = _own_schema(session, name)
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
    version = _append_checked(session, record, messages)
    notes = [*_describe(messages), f"Published {name} version {version}"]
    return SchemaOutcome(session.me.schemas[name].schema_id, version, notes)


def revert_schema(session: Session, name: str, target: int) -> SchemaOutcome:
    """A schema-revert restoring version `target`."""
    record, _ = _own_schema(session, name)
    version = _append_checked(session, record, [SchemaRevert(target)])
    history = local_history(session.me.author, record)
    notes = []
    if history.versions[version].ignored_revert:
        notes.append(
            f"note: an earlier revert between {target} and {version} targets a version before "
            f"{target}, so this revert changes nothing"
        )
    notes.append(f"Published {name} version {version} (reverted to version {target})")
    return SchemaOutcome(session.me.schemas[name].schema_id, version, notes)


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
    """The seeds' summary of a migration: `Created fields` / `- subject<text>`."""
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
