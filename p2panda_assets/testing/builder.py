"""Building corpora in code, for tests and benchmarks only (not the product's semantics):
authors publishing schema and instance messages as signed entries. Tests, property-based
corpora and benchmarks share it; it is also the shortest way to see what a corpus looks
like."""

from __future__ import annotations

from dataclasses import dataclass, field

from p2panda_assets.protocol.fieldtypes import FieldType
from p2panda_assets.protocol.keys import KeyPair
from p2panda_assets.protocol.log_writer import LogWriter
from p2panda_assets.protocol.messages import (
    ABSENT,
    Create,
    Delete,
    FieldChange,
    FieldValue,
    Message,
    SchemaLogRef,
    SchemaMeta,
    SchemaMigration,
    SchemaRevert,
    SchemaVersionRef,
    Update,
    _Absent,
    encode_message,
    format_schema_id,
)


@dataclass
class CorpusBuilder:
    """Collects (entry, payload) pairs in publication order."""

    pairs: list[tuple[bytes, bytes]] = field(default_factory=list)

    def publish(self, writer: LogWriter, message: Message | bytes) -> bytes:
        """Sign `message` (or raw payload bytes) as the writer's next entry; its hash."""
        payload = message if isinstance(message, bytes) else encode_message(message)
        self.pairs.append((writer.append(payload), payload))
        return writer.hashes[writer.next_seq - 1]

    def author(self, seed: int) -> Author:
        return Author(self, KeyPair.from_private_key(seed.to_bytes(32, "big")))


@dataclass
class Author:
    corpus: CorpusBuilder
    key_pair: KeyPair
    logs: dict[int, LogWriter] = field(default_factory=dict)

    def log(self, log_id: int) -> LogWriter:
        return self.logs.setdefault(log_id, LogWriter(self.key_pair, log_id))

    def schema(self, log_id: int, name: str = "test") -> SchemaAuthor:
        schema = SchemaAuthor(self, log_id)
        schema.meta(name)
        return schema


@dataclass
class SchemaAuthor:
    """One schema log; `version` is the seq of its last entry."""

    owner: Author
    log_id: int

    @property
    def schema_id(self) -> str:
        return format_schema_id(self.owner.key_pair.public_key, self.log_id)

    @property
    def version(self) -> int:
        return self.owner.log(self.log_id).next_seq - 1

    def ref(self, version: int | None = None) -> SchemaVersionRef:
        return SchemaVersionRef(
            self.owner.key_pair.public_key, self.log_id, version or self.version
        )

    @property
    def log_ref(self) -> SchemaLogRef:
        return SchemaLogRef(self.owner.key_pair.public_key, self.log_id)

    def _publish(self, message: Message | bytes) -> int:
        self.owner.corpus.publish(self.owner.log(self.log_id), message)
        return self.version

    def meta(self, name: str, **kwargs: object) -> int:
        return self._publish(SchemaMeta(name=name, spec=1, **kwargs))  # type: ignore[arg-type]

    def migrate(self, *changes: FieldChange) -> int:
        return self._publish(SchemaMigration(tuple(changes)))

    def revert(self, target: int) -> int:
        return self._publish(SchemaRevert(target))

    def raw(self, payload: bytes) -> int:
        return self._publish(payload)


def create_field(
    name: str,
    type_: str,
    *,
    default: FieldValue | _Absent = ABSENT,
    validation: str | None = None,
    schema: SchemaLogRef | None = None,
    cascade: bool | None = None,
) -> FieldChange:
    return FieldChange(name, "create", FieldType.parse(type_), validation, default, schema, cascade)


def update_field(
    name: str, type_: str, default: FieldValue, *, validation: str | None = None
) -> FieldChange:
    return FieldChange(name, "update", FieldType.parse(type_), validation, default)


def remove_field(name: str) -> FieldChange:
    return FieldChange(name, "remove")


@dataclass
class InstanceAuthor:
    """An author's instance log for one schema."""

    owner: Author
    log_id: int

    def _publish(self, message: Message | bytes) -> bytes:
        return self.owner.corpus.publish(self.owner.log(self.log_id), message)

    def create(self, ref: SchemaVersionRef, **fields: FieldValue) -> bytes:
        return self._publish(Create(ref, tuple(fields.items())))

    def update(self, ref: SchemaVersionRef, instance: bytes, **fields: FieldValue) -> bytes:
        return self._publish(Update(ref, instance, tuple(fields.items())))

    def delete(self, instance: bytes, ref: SchemaVersionRef | None = None) -> bytes:
        return self._publish(Delete(instance, ref))

    def raw(self, payload: bytes) -> bytes:
        return self._publish(payload)


def instances(owner: Author, log_id: int) -> InstanceAuthor:
    return InstanceAuthor(owner, log_id)
