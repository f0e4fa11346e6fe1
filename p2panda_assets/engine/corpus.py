"""A whole corpus of entries reduced to tables: the reference semantics, in stages.

Each stage works on one group and returns plain, picklable records, so the same
functions run here in one process (`reduce_corpus`, which `panda preview` prints) and
distributed over Spark partitions (the pipeline), and the two agree by construction:

1. per entry, `check_record`: decode, payload and signature (verification happens once);
2. per log, `chain_log`: the chain rules, then the messages of the accepted entries
   decoded, and a `LogSummary` (schema log or instance log, first schema named);
3. once, `Catalog`: the schema logs folded, schema version hashes indexed, instance logs
   assigned to schemas, and the build order of the registered schemas (all small);
4. per instance log, `reduce_instance_log`; per schema, `cascade` and `finish_schema`:
   rows, the deleted set its dependents need, and the accounts of its entries.

Every distinct entry ends with exactly one `Account` (rule A-ONCE, docs/semantics.md).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Generic

from p2panda_assets.engine.cascade import apply_cascades
from p2panda_assets.engine.instances import (
    Instance,
    LogReduction,
    OwnerLookup,
    Resolved,
    reduce_log,
)
from p2panda_assets.engine.lens import Lens, Value
from p2panda_assets.engine.relations import BuildOrder, HashIndex, build_order
from p2panda_assets.engine.schema_log import SchemaHistory, VersionState, fold_schema_log
from p2panda_assets.errors import P2pandaError, Pending, Reason, Rejection
from p2panda_assets.protocol.entry import Entry, check_signature, decode_entry, verify_entry
from p2panda_assets.protocol.hashing import DEFAULT_ALGORITHM
from p2panda_assets.protocol.ids import format_schema_id
from p2panda_assets.protocol.log import E, LogTip, validate_log
from p2panda_assets.protocol.messages import (
    SCHEMA_MESSAGE_TYPES,
    Create,
    Delete,
    Message,
    SchemaHashRef,
    Update,
    VersionedSchema,
    decode_message,
    is_schema_message,
)

LogKey = tuple[bytes, int]  # (author, log id)
LogItem = tuple[int, bytes, Message | P2pandaError]  # (seq, entry hash, message or why not)


def schema_id_of(key: LogKey) -> str:
    return format_schema_id(*key)


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

    @classmethod
    def of(
        cls, state: State, why: Rejection | Pending | P2pandaError, schema_id: str | None
    ) -> Account:
        return cls(state, why.reason, why.message, schema_id)


Accounts = dict[bytes, Account]


# --- 1. per entry ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Checked:
    """One (entry, payload) record after every check one entry alone allows."""

    key: bytes  # the entry hash (of undecodable bytes: their default-algorithm hash)
    log: LogKey | None  # where the entry decodes
    entry: Entry | None  # None: rejected
    rejection: Rejection | None


def check_record(raw: bytes, payload: bytes | None) -> Checked:
    """Every check one (entry, payload) record allows: the entry's layout, its payload,
    its signature (`verify_entry`)."""
    try:
        entry = verify_entry(raw, payload)
    except P2pandaError as error:
        try:
            decoded = decode_entry(raw)
        except P2pandaError:
            return Checked(
                DEFAULT_ALGORITHM.hash(raw), None, None, Rejection(error.reason, error.message)
            )
        log = (decoded.author, decoded.log_id)
        return Checked(decoded.hash, log, None, Rejection(error.reason, error.message))
    return Checked(entry.hash, (entry.author, entry.log_id), entry, None)


def check_ingested(raw: bytes, entry_hash: bytes) -> Checked:
    """`check_record` of an entry the store holds without a verdict: ingest decoded its
    bytes and matched its payload to it (`store.ingest.check_entry`) and kept its hash,
    so the signature is what is left to check, and nothing is decoded, hashed or checked
    twice. Rule E-SIGNATURE (docs/semantics.md)."""
    entry = decode_entry(raw, entry_hash)
    log = (entry.author, entry.log_id)
    try:
        check_signature(entry)
    except P2pandaError as error:
        return Checked(entry.hash, log, None, Rejection(error.reason, error.message))
    return Checked(entry.hash, log, entry, None)


# --- 2. per log -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LogSummary:
    """What the rest of the corpus needs to know of a log: is it a schema log (its first
    message that decodes is a schema message), and which schema its first
    schema-naming message names (for an instance log)."""

    is_schema: bool
    first_ref: VersionedSchema | None

    @property
    def settled(self) -> bool:
        """No later entry can change it: its first message decoded, and named a schema
        or was a schema message."""
        return self.is_schema or self.first_ref is not None


@dataclass(slots=True)
class ChainedLog:
    author: bytes
    log_id: int
    items: list[LogItem]  # the accepted entries, in seq order, messages decoded
    accounts: Accounts  # entries the chain rules rejected or hold pending
    ended: bool = False  # its last accepted entry ends the log

    @property
    def key(self) -> LogKey:
        return (self.author, self.log_id)

    @property
    def summary(self) -> LogSummary:
        return log_summary(
            (m.kind, m.schema if isinstance(m, Create | Update | Delete) else None)
            for _, _, m in self.items
            if not isinstance(m, P2pandaError)
        )


SCHEMA_KINDS = frozenset(t.kind for t in SCHEMA_MESSAGE_TYPES)


def log_summary(messages: Iterable[tuple[str, VersionedSchema | None]]) -> LogSummary:
    """A log's summary from its accepted messages that decode, in seq order, each as
    (kind, the schema it names): a schema log when the first is a schema message; else
    the first schema an instance message names. The pipeline passes what verification
    indexed of each message (`protocol.message_index`), so it need not decode them."""
    messages = iter(messages)
    first = next(messages, None)
    if first is None:
        return LogSummary(False, None)
    if first[0] in SCHEMA_KINDS:
        return LogSummary(True, None)
    first_ref = first[1] or next((ref for _, ref in messages if ref), None)
    return LogSummary(False, first_ref)


def cut_log(log: ChainedLog, version: int) -> ChainedLog:
    """A schema log as it stood when entry `version` was its newest: the lens in time
    that `--as-of-version` builds (the later entries had not arrived)."""
    return replace(log, items=[item for item in log.items if item[0] <= version], accounts={})


def chain_log(
    author: bytes, log_id: int, entries: Iterable[tuple[Entry, bytes]], tip: LogTip | None = None
) -> ChainedLog:
    """Apply the chain rules to one log's verified entries (or to those after `tip`, a
    log so far all accepted); decode the accepted ones."""
    entries = list(entries)
    payloads = {entry.hash: payload for entry, payload in entries}
    chained = chain_entries((entry for entry, _ in entries), tip)
    items = [(e.seq_num, e.hash, _decode(payloads[e.hash])) for e in chained.accepted]
    return ChainedLog(author, log_id, items, chained.accounts, chained.ended)


@dataclass(frozen=True, slots=True)
class ChainedEntries(Generic[E]):
    """One log's entries after the chain rules, before any message is decoded."""

    accepted: list[E]  # in seq order
    accounts: Accounts  # the entries rejected or held pending
    ended: bool  # the last accepted entry ends the log


def chain_entries(entries: Iterable[E], tip: LogTip | None = None) -> ChainedEntries[E]:
    """The chain rules (`protocol.log.validate_log`) as accounts: what `chain_log` does
    before it decodes the accepted messages."""
    verdict = validate_log(entries, tip)
    accounts: Accounts = {
        h: Account.of(State.REJECTED, r, None) for h, r in verdict.rejected.items()
    }
    for entry_hash, seq in verdict.pending.items():
        accounts[entry_hash] = Account(
            State.PENDING, Reason.AWAITING_ENTRY, f"awaits seq {seq} of its log"
        )
    ended = verdict.ended if verdict.accepted else bool(tip and tip.ended)
    return ChainedEntries(verdict.accepted, accounts, ended)


def _decode(payload: bytes) -> Message | P2pandaError:
    try:
        return decode_message(payload)
    except P2pandaError as error:
        return error


# --- 3. the catalog (once; small) -------------------------------------------------------


@dataclass(slots=True)
class Assignment:
    """Which schema each instance log belongs to, or why none yet."""

    schema_of: dict[LogKey, str] = field(default_factory=dict)
    pending: dict[LogKey, Pending] = field(default_factory=dict)  # schema not determinable
    duplicate: dict[LogKey, str] = field(default_factory=dict)  # an author's second log


@dataclass(slots=True)
class Catalog:
    """Every schema log folded, and the index of schema version hashes. `registered`:
    which schemas may be built (None: every schema present, as `panda preview`)."""

    histories: dict[str, SchemaHistory]
    hash_index: HashIndex
    registered: set[str] | None

    @classmethod
    def build(cls, schema_logs: Iterable[ChainedLog], registered: set[str] | None) -> Catalog:
        histories: dict[str, SchemaHistory] = {}
        hash_index: HashIndex = {}
        for log in schema_logs:
            schema_id = schema_id_of(log.key)
            histories[schema_id] = fold_schema_log(log.author, log.log_id, log.items)
            hash_index.update({entry_hash: (schema_id, seq) for seq, entry_hash, _ in log.items})
        return cls(histories, hash_index, registered)

    def resolve(self, ref: VersionedSchema) -> Resolved | Pending | Rejection:
        """Rule I-PENDING-1 (docs/semantics.md): the schema version a message names, or
        why it must wait (a schema or version not known, a schema not registered) or is
        rejected (a rejected version). What the version is, is the history's answer
        (`SchemaHistory.version_state`); a dead version resolves, and the message is
        refused after the log's schema is checked (`instances.refuse_dead_version`)."""
        if isinstance(ref, SchemaHashRef):
            found = self.hash_index.get(ref.hash)
            if found is None:
                return Pending(
                    Reason.AWAITING_VERSION, f"schema version {ref.hash.hex()} is not known"
                )
            schema_id, version = found
        else:
            schema_id, version = ref.schema_id, ref.version
        history = self.histories.get(schema_id)
        if history is None:
            return Pending(Reason.AWAITING_SCHEMA, f"schema {schema_id} is not known")
        if self.registered is not None and schema_id not in self.registered:
            return Pending(Reason.AWAITING_SCHEMA, f"schema {schema_id} is not registered")
        standing = history.version_state(version)
        if standing.state is VersionState.UNKNOWN:
            return Pending(
                Reason.AWAITING_VERSION, f"version {version} of {schema_id} is not known"
            )
        if standing.state is VersionState.REJECTED:
            refusal = standing.refusal(f" of {schema_id}")
            assert refusal is not None
            return refusal
        return Resolved(history, version)

    def assign(self, summaries: dict[LogKey, LogSummary]) -> Assignment:
        """Give each instance log the schema its first schema-naming message names. An
        author's second log of one schema is rejected whole (`duplicate-log`, rule
        I-ONE-LOG, docs/semantics.md): the lowest log id keeps it, whatever the arrival
        order."""
        assignment = Assignment()
        taken: set[tuple[bytes, str]] = set()
        for key in sorted(summaries):
            summary = summaries[key]
            if summary.is_schema:
                continue
            if summary.first_ref is None:
                assignment.pending[key] = Pending(
                    Reason.UNKNOWN_INSTANCE, "no message names a schema"
                )
                continue
            schema_id = self._schema_named(summary.first_ref)
            if isinstance(schema_id, Pending):
                assignment.pending[key] = schema_id
            elif (key[0], schema_id) in taken:
                assignment.duplicate[key] = schema_id
            else:
                taken.add((key[0], schema_id))
                assignment.schema_of[key] = schema_id
        return assignment

    def _schema_named(self, ref: VersionedSchema) -> str | Pending:
        if not isinstance(ref, SchemaHashRef):
            return ref.schema_id
        found = self.hash_index.get(ref.hash)
        if found is None:
            return Pending(Reason.AWAITING_VERSION, f"schema version {ref.hash.hex()} is not known")
        return found[0]

    def order(self) -> BuildOrder:
        return build_order(self.histories, self.registered, self.hash_index)

    def not_built(self, schema_id: str, order: BuildOrder) -> Pending:
        """Why the instance logs of a schema outside the build order wait."""
        if schema_id in order.pending:
            return order.pending[schema_id]
        known = "is not registered" if schema_id in self.histories else "is not known"
        return Pending(Reason.AWAITING_SCHEMA, f"schema {schema_id} {known}")

    def schema_accounts(self, schema_id: str) -> Accounts:
        """Accounts of a schema log's entries: versions applied (superseded when a revert
        made them dead), invalid and frozen ones rejected."""
        history = self.histories[schema_id]
        accounts: Accounts = {}
        for seq, version in history.versions.items():
            state = State.SUPERSEDED if seq in history.dead else State.APPLIED
            accounts[version.hash] = Account(state, schema_id=schema_id)
        for seq, rejection in history.rejected.items():
            accounts[history.entry_hashes[seq]] = Account.of(State.REJECTED, rejection, schema_id)
        return accounts


# --- 4. per instance log, then per schema ---------------------------------------------


def reduce_instance_log(
    catalog: Catalog,
    schema_id: str,
    log: ChainedLog,
    owners: OwnerLookup,
    start: LogReduction | None = None,
) -> LogReduction:
    """`reduce_log` of the log's items (with `start`: going on from that reduction)."""
    history = catalog.histories[schema_id]
    return reduce_log(log.author, log.log_id, history, log.items, catalog.resolve, owners, start)


def cascade(
    catalog: Catalog,
    schema_id: str,
    reductions: list[LogReduction],
    deleted_upstream: dict[str, set[bytes]],
) -> set[bytes]:
    """Apply cascading deletes to the schema's instances in place; every deleted id."""
    instances = {i.id: i for r in reductions for i in r.instances.values()}
    return apply_cascades(
        catalog.histories[schema_id], instances, deleted_upstream, catalog.hash_index
    )


def applied_if_live(instance: Instance, lens: Lens) -> set[bytes]:
    """The messages that shape a live instance: its create, and every update that still
    writes a field of the current lens."""
    return {instance.created_by} | {instance.writers[n] for n in lens if n in instance.writers}


def instance_accounts(instance: Instance, lens: Lens, schema_id: str) -> Accounts:
    """Rule A-SHAPING (docs/semantics.md): messages that shape a live instance are
    applied; the rest (and everything of a deleted instance) is superseded
    (`message_state`)."""
    live = instance.deleted_by is None
    shaping = applied_if_live(instance, lens) if live else set()
    return {
        h: Account(message_state(h, live, shaping), schema_id=schema_id) for h in instance.messages
    }


def message_state(message: bytes, live: bool, shaping: Collection[bytes]) -> State:
    """The state of one message of an instance: applied if the instance is live and
    the message shapes it (`applied_if_live`), else superseded."""
    return State.APPLIED if live and message in shaping else State.SUPERSEDED


def reduction_accounts(reduction: LogReduction, schema_id: str) -> Accounts:
    """Accounts of a reduced log's rejected, pending and delete entries, and of the
    messages that were held back for an instance a delete then deleted (superseded).
    The messages of its instances are accounted by `instance_accounts`."""
    accounts = {h: Account.of(State.REJECTED, r, schema_id) for h, r in reduction.rejected.items()}
    accounts.update(
        {h: Account.of(State.PENDING, r, schema_id) for h, r in reduction.pending.items()}
    )
    accounts.update({h: Account(State.APPLIED, schema_id=schema_id) for h in reduction.deletes})
    accounts.update(
        {h: Account(State.SUPERSEDED, schema_id=schema_id) for h in reduction.superseded}
    )
    return accounts


def pending_accounts(log: ChainedLog, why: Pending, schema_id: str | None) -> Accounts:
    """Rule A-PENDING (docs/semantics.md): a log whose schema cannot be built yet: its
    entries wait (or, if they do not even decode as instance messages, are rejected
    now)."""
    accounts: Accounts = {}
    for _, entry_hash, message in log.items:
        if isinstance(message, P2pandaError):
            accounts[entry_hash] = Account.of(State.REJECTED, message, schema_id)
        elif is_schema_message(message):
            accounts[entry_hash] = Account(
                State.REJECTED,
                Reason.NOT_INSTANCE_MESSAGE,
                "a schema message on an instance log",
                schema_id,
            )
        else:
            accounts[entry_hash] = Account.of(State.PENDING, why, schema_id)
    return accounts


def duplicate_log_accounts(log: ChainedLog, schema_id: str) -> Accounts:
    return {
        entry_hash: Account(
            State.REJECTED,
            Reason.DUPLICATE_LOG,
            "author has a lower log for this schema",
            schema_id,
        )
        for _, entry_hash, _ in log.items
    }


@dataclass(frozen=True, slots=True)
class Row:
    instance_id: bytes
    author: bytes
    version: int
    seq: int
    entry: bytes  # the entry that last wrote the row: its trace to a signed item
    values: dict[str, Value]


def row_of(instance: Instance, lens: Lens) -> Row:
    """An instance seen through the current lens (rule S-LENS, docs/semantics.md): the
    system columns, then one value per field of the lens (rule T-ROW)."""
    return Row(
        instance.id,
        instance.author,
        instance.version,
        instance.seq,
        instance.messages[-1],
        {n: instance.values.get(n) for n in lens},
    )


@dataclass(slots=True)
class Table:
    """A schema's materialization: rows sorted by instance id, plus how lossy it was.
    A schema whose lens has no field left has no table (`dropped`)."""

    schema_id: str
    history: SchemaHistory
    rows: list[Row]
    fallbacks: dict[str, int]  # field -> rows whose value fell back to the default
    upstream: tuple[str, ...]  # schemas its relations point at

    @property
    def dropped(self) -> bool:
        """Rule S-DROP (docs/semantics.md): a lens with no field left has no table."""
        return not self.history.lens


def finish_schema(
    catalog: Catalog, schema_id: str, reductions: list[LogReduction], upstream: tuple[str, ...]
) -> tuple[Table, Accounts]:
    """The table and the instance accounts of a schema whose cascades are applied."""
    history = catalog.histories[schema_id]
    lens = history.lens
    accounts: Accounts = {}
    instances = [i for r in reductions for i in r.instances.values()]
    for reduction in reductions:
        accounts.update(reduction_accounts(reduction, schema_id))
    for instance in instances:
        accounts.update(instance_accounts(instance, lens, schema_id))
    live = sorted((i for i in instances if i.deleted_by is None), key=lambda i: i.id.hex())
    fallbacks = dict.fromkeys(lens, 0)
    for instance in live:
        for name in instance.fell_back & fallbacks.keys():
            fallbacks[name] += 1
    table = Table(schema_id, history, [row_of(i, lens) for i in live], fallbacks, upstream)
    return table, accounts


# --- the composition ------------------------------------------------------------------


@dataclass(slots=True)
class Corpus:
    accounts: Accounts = field(default_factory=dict)  # entry hash -> account
    histories: dict[str, SchemaHistory] = field(default_factory=dict)
    tables: dict[str, Table] = field(default_factory=dict)
    pending: dict[str, Pending] = field(default_factory=dict)  # schemas not built, why
    # The instances deleted in each built schema, by a delete or a cascade: its dependents'
    # cascades read them (`p2panda.deleted_instances`).
    deleted: dict[str, set[bytes]] = field(default_factory=dict)
    duplicates: int = 0

    def counts(self, schema_id: str) -> dict[State, int]:
        counts = dict.fromkeys(State, 0)
        for account in self.accounts.values():
            if account.schema_id == schema_id:
                counts[account.state] += 1
        return counts


def reduce_corpus(
    pairs: Iterable[tuple[bytes, bytes | None]], registered: set[str] | None = None
) -> Corpus:
    """Reduce every (entry, payload) pair, stage by stage, in this process; every
    distinct entry ends with exactly one account (rule A-ONCE, docs/semantics.md)."""
    corpus = Corpus()
    verified, log_of = _check_all(pairs, corpus)
    by_log: dict[LogKey, list[tuple[Entry, bytes]]] = defaultdict(list)
    for entry, payload in verified.values():
        by_log[(entry.author, entry.log_id)].append((entry, payload))
    logs = {key: chain_log(*key, entries) for key, entries in sorted(by_log.items())}
    for log in logs.values():
        corpus.accounts.update(log.accounts)
    summaries = {key: log.summary for key, log in logs.items()}
    catalog = Catalog.build((logs[k] for k, s in summaries.items() if s.is_schema), registered)
    corpus.histories = catalog.histories
    assignment = catalog.assign(summaries)
    owners = {h: log.key for log in logs.values() for _, h, m in log.items if isinstance(m, Create)}
    built = catalog.order()
    corpus.pending.update(built.pending)
    by_schema: dict[str, list[ChainedLog]] = defaultdict(list)
    for key, schema_id in assignment.schema_of.items():
        by_schema[schema_id].append(logs[key])
    deleted = corpus.deleted
    for schema_id in built.order:
        reductions = [
            reduce_instance_log(catalog, schema_id, log, owners.get) for log in by_schema[schema_id]
        ]
        deleted[schema_id] = cascade(catalog, schema_id, reductions, deleted)
        table, accounts = finish_schema(catalog, schema_id, reductions, built.upstream[schema_id])
        corpus.tables[schema_id] = table
        corpus.accounts.update(accounts)
    for schema_id, schema_logs in by_schema.items():
        if schema_id not in corpus.tables:
            why = catalog.not_built(schema_id, built)
            for log in schema_logs:
                corpus.accounts.update(pending_accounts(log, why, schema_id))
    for key, why in assignment.pending.items():
        corpus.accounts.update(pending_accounts(logs[key], why, None))
    for key, schema_id in assignment.duplicate.items():
        corpus.accounts.update(duplicate_log_accounts(logs[key], schema_id))
    for schema_id in catalog.histories:
        corpus.accounts.update(catalog.schema_accounts(schema_id))
    schema_of_log = {key: schema_id_of(key) for key, s in summaries.items() if s.is_schema}
    schema_of_log.update(assignment.schema_of)
    schema_of_log.update(assignment.duplicate)
    corpus.accounts = attribute(corpus.accounts, log_of, schema_of_log)
    return corpus


def _check_all(
    pairs: Iterable[tuple[bytes, bytes | None]], corpus: Corpus
) -> tuple[dict[bytes, tuple[Entry, bytes]], dict[bytes, LogKey]]:
    """Check every distinct record once. Identical records are duplicates; an entry that
    verifies with one payload wins over copies of it that came with a wrong one (the
    smallest reason is kept otherwise, so the order of arrival never matters)."""
    good: dict[bytes, tuple[Entry, bytes]] = {}
    bad: dict[bytes, Rejection] = {}
    log_of: dict[bytes, LogKey] = {}
    seen: set[tuple[bytes, bytes | None]] = set()
    for raw, payload in pairs:
        record = (bytes(raw), payload)
        if record in seen:
            corpus.duplicates += 1
            continue
        seen.add(record)
        checked = check_record(*record)
        if checked.log is not None:
            log_of[checked.key] = checked.log
        if checked.entry is not None:
            assert payload is not None  # an entry verifies only with its payload
            if checked.key in good:
                corpus.duplicates += 1
            good[checked.key] = (checked.entry, payload)
        else:
            rejection = checked.rejection
            assert rejection is not None  # no entry: a rejection says why
            if checked.key not in bad or _smaller(rejection, bad[checked.key]):
                bad[checked.key] = rejection
    for key, rejection in bad.items():
        if key not in good:
            corpus.accounts[key] = Account.of(State.REJECTED, rejection, None)
    return good, log_of


def _smaller(a: Rejection | None, b: Rejection) -> bool:
    return a is not None and (a.reason, a.message) < (b.reason, b.message)


def attribute(
    accounts: Accounts, log_of: dict[bytes, LogKey], schema_of_log: dict[LogKey, str]
) -> Accounts:
    """Give entries rejected or pending before their log was classified (signature,
    chain rules) the schema of their log, where it is known."""
    result = dict(accounts)
    for entry_hash, account in accounts.items():
        if account.schema_id is None:
            schema_id = schema_of_log.get(log_of.get(entry_hash, (b"", -1)))
            if schema_id is not None:
                result[entry_hash] = Account(
                    account.state, account.reason, account.message, schema_id
                )
    return result
