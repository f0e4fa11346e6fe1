"""A whole corpus of entries reduced to tables: the reference semantics, end to end.

From (entry, payload) pairs: verify each entry once, apply each log's chain rules,
decode the messages, fold the schema logs, assign the instance logs to schemas, order
the schemas by their relations, reduce each buildable schema's logs, apply cascades,
and account for every distinct entry. `panda preview` prints what this computes, and
the Spark pipeline must compute exactly the same.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum

from p2panda_assets.engine.cascade import apply_cascades
from p2panda_assets.engine.instances import (
    Instance,
    LogReduction,
    Resolved,
    Waiting,
    reduce_log,
)
from p2panda_assets.engine.lens import Value
from p2panda_assets.engine.relations import build_order
from p2panda_assets.engine.schema_log import SchemaHistory, fold_schema_log
from p2panda_assets.errors import P2pandaError, Reason
from p2panda_assets.protocol.entry import Entry, decode_entry, verify_entry
from p2panda_assets.protocol.hashing import DEFAULT_ALGORITHM
from p2panda_assets.protocol.log import Rejection, validate_log
from p2panda_assets.protocol.messages import (
    Create,
    Message,
    SchemaHashRef,
    VersionedSchema,
    decode_message,
    is_schema_message,
)

LogKey = tuple[bytes, int]  # (author, log id)


class State(StrEnum):
    APPLIED = "applied"
    SUPERSEDED = "superseded"
    PENDING = "pending"
    REJECTED = "rejected"


@dataclass(frozen=True, slots=True)
class Account:
    """Where one distinct entry ended: its state, the reason (for rejected and pending)
    and the schema it belongs to, where that is known."""

    state: State
    reason: Reason | None = None
    message: str = ""
    schema_id: str | None = None


@dataclass(frozen=True, slots=True)
class Row:
    instance_id: bytes
    author: bytes
    version: int
    seq: int
    values: dict[str, Value]


@dataclass(slots=True)
class Table:
    """A schema's materialization: rows sorted by instance id, plus how lossy it was."""

    schema_id: str
    history: SchemaHistory
    rows: list[Row]
    fallbacks: dict[str, int]  # field -> rows whose value fell back to the default
    upstream: tuple[str, ...]  # schemas its relations point at


@dataclass(slots=True)
class Corpus:
    accounts: dict[bytes, Account] = field(default_factory=dict)  # entry hash -> account
    histories: dict[str, SchemaHistory] = field(default_factory=dict)
    tables: dict[str, Table] = field(default_factory=dict)
    waiting: dict[str, Rejection] = field(default_factory=dict)  # schemas not built, why
    duplicates: int = 0

    def counts(self, schema_id: str) -> dict[State, int]:
        counts = dict.fromkeys(State, 0)
        for account in self.accounts.values():
            if account.schema_id == schema_id:
                counts[account.state] += 1
        return counts


@dataclass(slots=True)
class _Log:
    author: bytes
    log_id: int
    items: list[tuple[int, bytes, Message | P2pandaError]]

    @property
    def key(self) -> LogKey:
        return (self.author, self.log_id)


def reduce_corpus(
    pairs: Iterable[tuple[bytes, bytes | None]], registered: set[str] | None = None
) -> Corpus:
    """Reduce every (entry, payload) pair. `registered` limits which schemas are built
    (None: every schema present, as `panda preview` does)."""
    corpus = Corpus()
    log_of: dict[bytes, LogKey] = {}
    entries = _verify_all(pairs, corpus, log_of)
    logs = _chain_all(entries, corpus)
    schema_logs, instance_logs = _classify(logs)
    for log in schema_logs:
        corpus.histories[_schema_id(log.key)] = fold_schema_log(log.author, log.log_id, log.items)
    hash_index = _schema_hash_index(schema_logs)

    def resolve(ref: VersionedSchema) -> Resolved | Waiting:
        return _resolve(ref, corpus.histories, hash_index, registered)

    owners = {
        entry_hash: log.key
        for log in instance_logs
        for _, entry_hash, message in log.items
        if isinstance(message, Create)
    }
    by_schema, unassigned = _assign(instance_logs, resolve, corpus)
    built = build_order(corpus.histories, registered, hash_index)
    corpus.waiting.update(built.waiting)
    deleted: dict[str, set[bytes]] = {}
    for schema_id in built.order:
        history = corpus.histories[schema_id]
        reductions = [
            (log, reduce_log(log.author, log.log_id, history, log.items, resolve, owners.get))
            for log in by_schema.get(schema_id, [])
        ]
        instances = {i.id: i for _, r in reductions for i in r.instances.values()}
        deleted[schema_id] = apply_cascades(history, instances, deleted, hash_index)
        corpus.tables[schema_id] = _table(history, instances, built.upstream[schema_id])
        for log, reduction in reductions:
            _account_log(corpus, schema_id, log, reduction, instances)
    for schema_id, logs_of_schema in by_schema.items():
        if schema_id not in corpus.tables:
            why = corpus.waiting.get(schema_id) or Rejection(
                Reason.AWAITING_SCHEMA, f"schema {schema_id} is not known"
            )
            for log in logs_of_schema:
                _account_waiting(corpus, log, why, schema_id)
    for log, why in unassigned:
        _account_waiting(corpus, log, why, None)
    for schema_id, history in corpus.histories.items():
        _account_schema(corpus, schema_id, history)
    schema_of_log = {log.key: _schema_id(log.key) for log in schema_logs}
    schema_of_log.update({log.key: sid for sid, logs_ in by_schema.items() for log in logs_})
    _attribute(corpus, log_of, schema_of_log)
    return corpus


def _schema_id(key: LogKey) -> str:
    return f"{key[0].hex()}-{key[1]}"


# --- entries and logs ----------------------------------------------------------------


def _verify_all(
    pairs: Iterable[tuple[bytes, bytes | None]], corpus: Corpus, log_of: dict[bytes, LogKey]
) -> dict[bytes, tuple[Entry, bytes]]:
    """Verify every pair once. Identical entries are duplicates; an entry that verifies
    with one payload wins over copies of it that came with a wrong one."""
    good: dict[bytes, tuple[Entry, bytes]] = {}
    bad: dict[bytes, Rejection] = {}
    seen: set[tuple[bytes, bytes | None]] = set()
    for raw, payload in pairs:
        raw = bytes(raw)
        if (raw, payload) in seen:
            corpus.duplicates += 1
            continue
        seen.add((raw, payload))
        try:
            entry = verify_entry(raw, payload)
        except P2pandaError as error:
            key, log_key = _entry_key(raw)
            if log_key is not None:
                log_of[key] = log_key
            if key not in bad or (error.reason, error.message) < (
                bad[key].reason,
                bad[key].message,
            ):
                bad[key] = Rejection(error.reason, error.message)
            continue
        if entry.hash in good:
            corpus.duplicates += 1
        good[entry.hash] = (entry, payload)  # type: ignore[assignment]
        log_of[entry.hash] = (entry.author, entry.log_id)
    for key, rejection in bad.items():
        if key not in good:
            corpus.accounts[key] = Account(State.REJECTED, rejection.reason, rejection.message)
    return good


def _entry_key(raw: bytes) -> tuple[bytes, LogKey | None]:
    """The entry hash (and log) of bytes that may not verify: in the algorithm of their
    payload hash where the entry decodes, else in the default one."""
    try:
        entry = decode_entry(raw)
    except P2pandaError:
        return DEFAULT_ALGORITHM.hash(raw), None
    return entry.hash, (entry.author, entry.log_id)


def _chain_all(entries: dict[bytes, tuple[Entry, bytes]], corpus: Corpus) -> list[_Log]:
    """Apply each log's chain rules; decode the messages of its accepted entries."""
    by_log: dict[LogKey, list[Entry]] = defaultdict(list)
    for entry, _ in entries.values():
        by_log[(entry.author, entry.log_id)].append(entry)
    logs = []
    for (author, log_id), log_entries in sorted(by_log.items()):
        verdict = validate_log(log_entries)
        for entry_hash, rejection in verdict.rejected.items():
            corpus.accounts[entry_hash] = Account(
                State.REJECTED, rejection.reason, rejection.message
            )
        for entry_hash, seq in verdict.pending.items():
            corpus.accounts[entry_hash] = Account(
                State.PENDING, Reason.AWAITING_ENTRY, f"awaits seq {seq} of its log"
            )
        items = [(e.seq_num, e.hash, _decode(entries[e.hash][1])) for e in verdict.accepted]
        logs.append(_Log(author, log_id, items))
    return logs


def _decode(payload: bytes) -> Message | P2pandaError:
    try:
        return decode_message(payload)
    except P2pandaError as error:
        return error


def _classify(logs: list[_Log]) -> tuple[list[_Log], list[_Log]]:
    """A log is a schema log iff its first message that decodes is a schema message."""
    schema_logs, instance_logs = [], []
    for log in logs:
        first = next((m for _, _, m in log.items if not isinstance(m, P2pandaError)), None)
        if first is not None and is_schema_message(first):
            schema_logs.append(log)
        else:
            instance_logs.append(log)
    return schema_logs, instance_logs


# --- schema references ---------------------------------------------------------------


HashIndex = dict[bytes, tuple[str, int]]  # schema entry hash -> (schema id, seq)


def _schema_hash_index(schema_logs: list[_Log]) -> HashIndex:
    return {
        entry_hash: (_schema_id(log.key), seq)
        for log in schema_logs
        for seq, entry_hash, _ in log.items
    }


def _resolve(
    ref: VersionedSchema,
    histories: dict[str, SchemaHistory],
    hash_index: HashIndex,
    registered: set[str] | None,
) -> Resolved | Waiting:
    if isinstance(ref, SchemaHashRef):
        found = hash_index.get(ref.hash)
        if found is None:
            return Waiting(Reason.AWAITING_VERSION, f"schema version {ref.hash.hex()} is not known")
        schema_id, version = found
    else:
        schema_id, version = ref.schema_id, ref.version
    history = histories.get(schema_id)
    if history is None:
        return Waiting(Reason.AWAITING_SCHEMA, f"schema {schema_id} is not known")
    if registered is not None and schema_id not in registered:
        return Waiting(Reason.AWAITING_SCHEMA, f"schema {schema_id} is not registered")
    if version in history.versions:
        return Resolved(history, version)
    if version in history.rejected:
        rejection = history.rejected[version]
        return Waiting(
            Reason.REJECTED_VERSION,
            f"version {version} of {schema_id} was rejected ({rejection.reason})",
            rejected=True,
        )
    return Waiting(Reason.AWAITING_VERSION, f"version {version} of {schema_id} is not known")


def _ref_schema_id(ref: VersionedSchema, hash_index: HashIndex) -> str | None:
    if isinstance(ref, SchemaHashRef):
        found = hash_index.get(ref.hash)
        return None if found is None else found[0]
    return ref.schema_id


# --- instance logs -------------------------------------------------------------------


def _assign(
    instance_logs: list[_Log], resolve, corpus: Corpus
) -> tuple[dict[str, list[_Log]], list[tuple[_Log, Rejection]]]:
    """Give each instance log the schema its first schema-naming message names. An
    author's second log of one schema is rejected whole (`duplicate-log`)."""
    by_schema: dict[str, list[_Log]] = defaultdict(list)
    unassigned: list[tuple[_Log, Rejection]] = []
    taken: set[tuple[bytes, str]] = set()
    for log in instance_logs:  # sorted by (author, log id): the lowest log id wins
        ref = next(
            (
                m.schema
                for _, _, m in log.items
                if not isinstance(m, P2pandaError) and getattr(m, "schema", None)
            ),
            None,
        )
        if ref is None:
            unassigned.append(
                (log, Rejection(Reason.UNKNOWN_INSTANCE, "no message names a schema"))
            )
            continue
        resolved = resolve(ref)
        schema_id = resolved.history.schema_id if isinstance(resolved, Resolved) else None
        if schema_id is None and not isinstance(ref, SchemaHashRef):
            schema_id = ref.schema_id
        if schema_id is None:
            assert isinstance(resolved, Waiting)
            unassigned.append((log, Rejection(resolved.reason, resolved.message)))
            continue
        if (log.author, schema_id) in taken:
            for _, entry_hash, _ in log.items:
                corpus.accounts[entry_hash] = Account(
                    State.REJECTED,
                    Reason.DUPLICATE_LOG,
                    "author has a lower log for this schema",
                    schema_id,
                )
            continue
        taken.add((log.author, schema_id))
        by_schema[schema_id].append(log)
    return by_schema, unassigned


def _account_waiting(corpus: Corpus, log: _Log, why: Rejection, schema_id: str | None) -> None:
    """A log whose schema cannot be built yet: its entries wait (or, if they do not even
    decode as instance messages, are rejected now)."""
    for _, entry_hash, message in log.items:
        if isinstance(message, P2pandaError):
            corpus.accounts[entry_hash] = Account(
                State.REJECTED, message.reason, message.message, schema_id
            )
        elif is_schema_message(message):
            corpus.accounts[entry_hash] = Account(
                State.REJECTED,
                Reason.NOT_INSTANCE_MESSAGE,
                "a schema message on an instance log",
                schema_id,
            )
        else:
            corpus.accounts[entry_hash] = Account(State.PENDING, why.reason, why.message, schema_id)


def _account_log(
    corpus: Corpus,
    schema_id: str,
    log: _Log,
    reduction: LogReduction,
    instances: dict[bytes, Instance],
) -> None:
    for entry_hash, rejection in reduction.rejected.items():
        corpus.accounts[entry_hash] = Account(
            State.REJECTED, rejection.reason, rejection.message, schema_id
        )
    for entry_hash, rejection in reduction.pending.items():
        corpus.accounts[entry_hash] = Account(
            State.PENDING, rejection.reason, rejection.message, schema_id
        )
    for entry_hash in reduction.deletes:
        corpus.accounts[entry_hash] = Account(State.APPLIED, schema_id=schema_id)
    lens = corpus.histories[schema_id].lens
    for instance in reduction.instances.values():
        live = instance.deleted_by is None
        shaping = {instance.writers[name] for name in lens if name in instance.writers}
        for entry_hash in instance.messages:
            applied = live and (entry_hash == instance.created_by or entry_hash in shaping)
            state = State.APPLIED if applied else State.SUPERSEDED
            corpus.accounts[entry_hash] = Account(state, schema_id=schema_id)


def _account_schema(corpus: Corpus, schema_id: str, history: SchemaHistory) -> None:
    for seq, version in history.versions.items():
        state = State.SUPERSEDED if seq in history.dead else State.APPLIED
        corpus.accounts[version.hash] = Account(state, schema_id=schema_id)
    for seq, rejection in history.rejected.items():
        corpus.accounts[history.entry_hashes[seq]] = Account(
            State.REJECTED, rejection.reason, rejection.message, schema_id
        )


def _attribute(
    corpus: Corpus, log_of: dict[bytes, LogKey], schema_of_log: dict[LogKey, str]
) -> None:
    """Give entries rejected or pending before their log was classified (signature,
    chain rules) the schema of their log, where it is known."""
    for entry_hash, account in corpus.accounts.items():
        if account.schema_id is None:
            schema_id = schema_of_log.get(log_of.get(entry_hash, (b"", -1)))
            if schema_id is not None:
                corpus.accounts[entry_hash] = Account(
                    account.state, account.reason, account.message, schema_id
                )


# --- tables --------------------------------------------------------------------------


def _table(
    history: SchemaHistory, instances: dict[bytes, Instance], upstream: tuple[str, ...]
) -> Table:
    lens = history.lens
    rows = [
        Row(i.id, i.author, i.version, i.seq, {name: i.values.get(name) for name in lens})
        for i in sorted(instances.values(), key=lambda i: i.id.hex())
        if i.deleted_by is None
    ]
    fallbacks = {name: 0 for name in lens}
    for instance in instances.values():
        if instance.deleted_by is None:
            for name in instance.fell_back & fallbacks.keys():
                fallbacks[name] += 1
    return Table(history.schema_id, history, rows, fallbacks, upstream)
