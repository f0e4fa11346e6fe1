"""Properties of the reduction on random corpora (hypothesis)."""

from __future__ import annotations

import math
from dataclasses import replace
from random import Random

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from p2panda_assets.engine.corpus import (
    Catalog,
    Corpus,
    State,
    chain_log,
    check_record,
    reduce_corpus,
    reduce_instance_log,
)
from p2panda_assets.errors import P2pandaError
from p2panda_assets.protocol.messages import (
    Create,
    Delete,
    Message,
    SchemaHashRef,
    SchemaVersionRef,
    decode_message,
    is_instance_message,
    is_schema_message,
)
from p2panda_assets.testing.builder import CorpusBuilder
from tests.strategies import corpora

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def snapshot(result: Corpus) -> tuple:
    """Everything observable: tables (values compared with NaN == NaN), accounts, pending."""

    def same(value: object) -> object:
        return "NaN" if isinstance(value, float) and math.isnan(value) else value

    tables = {
        schema_id: [
            (r.instance_id, r.author, r.version, r.seq, {k: same(v) for k, v in r.values.items()})
            for r in table.rows
        ]
        for schema_id, table in result.tables.items()
    }
    return tables, result.accounts, result.pending


def interleave(pairs: list[tuple[bytes, bytes]], rnd: Random) -> list[tuple[bytes, bytes]]:
    """A random interleaving of the logs that keeps each log's own order."""
    by_log: dict[bytes, list[tuple[bytes, bytes]]] = {}
    for pair in pairs:
        by_log.setdefault(pair[0][1:34], []).append(pair)  # author and first log id byte
    queues = [list(q) for q in by_log.values()]
    out = []
    while queues:
        queue = rnd.choice(queues)
        out.append(queue.pop(0))
        if not queue:
            queues.remove(queue)
    return out


@SETTINGS
@given(corpora(), st.randoms(use_true_random=False))
def test_reduction_does_not_depend_on_how_logs_interleave(corpus, rnd: Random) -> None:
    assert snapshot(reduce_corpus(corpus.pairs)) == snapshot(
        reduce_corpus(interleave(corpus.pairs, rnd))
    )


@SETTINGS
@given(corpora(), st.randoms(use_true_random=False))
def test_reduction_does_not_depend_on_arrival_order_at_all(corpus, rnd: Random) -> None:
    shuffled = list(corpus.pairs)
    rnd.shuffle(shuffled)
    assert snapshot(reduce_corpus(corpus.pairs)) == snapshot(reduce_corpus(shuffled))


@SETTINGS
@given(corpora(), st.randoms(use_true_random=False))
def test_one_entry_at_a_time_every_stored_entry_is_accounted_for(corpus, rnd: Random) -> None:
    """Entries arriving one by one: after each arrival every distinct entry has exactly
    one state, and the last state equals reducing everything at once."""
    arrivals = interleave(corpus.pairs, rnd)
    for end in range(1, len(arrivals) + 1):
        result = reduce_corpus(arrivals[:end])
        distinct_entries = {raw for raw, _ in arrivals[:end]}
        assert len(result.accounts) == len(distinct_entries)
        attributed = sum(sum(result.counts(s).values()) for s in result.histories)
        unattributed = sum(1 for a in result.accounts.values() if a.schema_id is None)
        instance_only = sum(
            1
            for a in result.accounts.values()
            if a.schema_id is not None and a.schema_id not in result.histories
        )
        assert attributed + unattributed + instance_only == len(result.accounts)
    assert snapshot(reduce_corpus(arrivals)) == snapshot(reduce_corpus(corpus.pairs))


def schema_entries_last(
    corpus: CorpusBuilder, rnd: Random
) -> tuple[list[tuple[bytes, bytes]], list[tuple[bytes, bytes]]]:
    """The corpus split in two: every other entry (logs interleaved), then the entries
    of the schema logs in a random order (gaps included: a later version before an
    earlier one waits for it)."""
    schema_pairs = [p for p in corpus.pairs if is_schema_payload(p[1])]
    others = [p for p in corpus.pairs if not is_schema_payload(p[1])]
    rnd.shuffle(schema_pairs)
    return interleave(others, rnd), schema_pairs


def is_schema_payload(payload: bytes) -> bool:
    try:
        return is_schema_message(decode_message(payload))
    except P2pandaError:
        return False


def unresolved(ref: object, histories: dict) -> bool:
    """A message's own schema reference names a version that is not known (yet)."""
    if ref is None:
        return False
    if isinstance(ref, SchemaHashRef):
        return not any(ref.hash in h.entry_hashes.values() for h in histories.values())
    history = histories.get(ref.schema_id)
    return history is None or (
        ref.version not in history.versions and ref.version not in history.rejected
    )


def instance_logs(pairs: list[tuple[bytes, bytes]]) -> list[list[tuple[bytes, Message]]]:
    """The chain-accepted entries of every log, as the reduction sees them, decoded
    (messages that do not decode, and schema messages, left out: they are rejected)."""
    by_log: dict[tuple[bytes, int], dict[bytes, tuple]] = {}
    for raw, payload in pairs:
        checked = check_record(raw, payload)
        if checked.entry is not None and checked.log is not None:
            by_log.setdefault(checked.log, {})[checked.key] = (checked.entry, payload)
    logs = []
    for key, entries in by_log.items():
        log = chain_log(*key, entries.values())
        logs.append(
            [
                (h, m)
                for _, h, m in log.items
                if not isinstance(m, P2pandaError) and is_instance_message(m)
            ]
        )
    return logs


def assert_pending_holds_back_only_its_own_instance(
    result: Corpus, pairs: list[tuple[bytes, bytes]]
) -> None:
    """Rules I-PENDING-2, I-PENDING-3, checked entry by entry on every built instance log: a
    create or update waits exactly when the version it names is not known yet or an
    earlier message of its own instance waits; a delete never waits for those, and once
    applied turns what waited for its instance superseded (nothing of the instance before
    it stays pending or applied). What waits and no delete superseded is pending."""
    for log in instance_logs(pairs):
        if not log:
            continue
        schema_id = result.accounts[log[0][0]].schema_id
        if schema_id not in result.tables:
            continue  # the whole log waits for its schema (Relations), or is rejected
        held: dict[bytes, list[bytes]] = {}  # instance id -> its waiting entries
        pending: set[bytes] = set()  # the entries that must be pending
        seen: list[tuple[bytes, bytes]] = []  # (instance id, entry hash), in log order
        for entry_hash, message in log:
            instance_id = entry_hash if isinstance(message, Create) else message.instance
            state = result.accounts[entry_hash].state
            if isinstance(message, Delete):
                own_schema = (
                    isinstance(message.schema, SchemaVersionRef)
                    and message.schema.schema_id == schema_id
                )
                waits = not own_schema and unresolved(message.schema, result.histories)
                if state is State.APPLIED:
                    assert not waits
                    pending -= set(held.pop(instance_id, []))
                    earlier = {result.accounts[h].state for i, h in seen if i == instance_id}
                    assert earlier <= {State.SUPERSEDED, State.REJECTED}, earlier
            else:
                waits = instance_id in held or unresolved(message.schema, result.histories)
            if waits:
                held.setdefault(instance_id, []).append(entry_hash)
                pending.add(entry_hash)
            seen.append((instance_id, entry_hash))
        for entry_hash, _ in log:
            state = result.accounts[entry_hash].state
            assert (state is State.PENDING) == (entry_hash in pending), (entry_hash, state)


@SETTINGS
@given(corpora(), st.randoms(use_true_random=False))
def test_a_pending_message_holds_back_only_the_later_messages_of_its_own_instance(
    corpus, rnd: Random
) -> None:
    """Schema versions arriving late, one by one, in any order: at every step only the
    instances that wait for a version are held back, every entry has one account, and
    the end state is the one computed when every version was there from the start."""
    instance_pairs, schema_pairs = schema_entries_last(corpus, rnd)
    for end in range(len(schema_pairs) + 1):
        arrived = instance_pairs + schema_pairs[:end]
        result = reduce_corpus(arrived)
        assert len(result.accounts) == len({raw for raw, _ in arrived})
        assert_pending_holds_back_only_its_own_instance(result, arrived)
    assert snapshot(result) == snapshot(reduce_corpus(corpus.pairs))


@SETTINGS
@given(corpora(), st.randoms(use_true_random=False))
def test_the_end_state_does_not_depend_on_when_schema_versions_arrive(corpus, rnd: Random) -> None:
    """Tables and accounts once every schema version is there: the same whether the
    versions came first, last, or among the instance messages."""
    instance_pairs, schema_pairs = schema_entries_last(corpus, rnd)
    from_the_start = reduce_corpus(schema_pairs + instance_pairs)
    assert snapshot(reduce_corpus(instance_pairs + schema_pairs)) == snapshot(from_the_start)
    mixed = list(instance_pairs)
    for pair in schema_pairs:
        mixed.insert(rnd.randint(0, len(mixed)), pair)
    assert snapshot(reduce_corpus(mixed)) == snapshot(from_the_start)
    assert snapshot(from_the_start) == snapshot(reduce_corpus(corpus.pairs))


@SETTINGS
@given(corpora(), st.randoms(use_true_random=False))
def test_a_log_reduced_in_two_parts_is_the_log_reduced_whole(corpus, rnd: Random) -> None:
    """`reduce_log` going on from the reduction of a log's first entries (`start`), cut
    anywhere, pending holds included, gives the log's reduction in one pass: what an
    increment's `before` rows are read off."""
    by_log: dict[tuple[bytes, int], dict[bytes, tuple]] = {}
    for raw, payload in corpus.pairs:
        checked = check_record(raw, payload)
        if checked.entry is not None and checked.log is not None:
            by_log.setdefault(checked.log, {})[checked.key] = (checked.entry, payload)
    logs = {key: chain_log(*key, entries.values()) for key, entries in by_log.items()}
    summaries = {key: log.summary for key, log in logs.items()}
    catalog = Catalog.build([logs[k] for k, s in summaries.items() if s.is_schema], None)
    owners = {h: log.key for log in logs.values() for _, h, m in log.items if isinstance(m, Create)}
    assigned = catalog.assign(summaries).schema_of
    assume(assigned)  # a corpus of schema logs alone has nothing to cut
    for key, schema_id in assigned.items():
        log = logs[key]
        cut = rnd.randint(0, len(log.items))
        head = replace(log, items=log.items[:cut])
        rest = replace(log, items=log.items[cut:])
        whole = reduce_instance_log(catalog, schema_id, log, owners.get)
        started = reduce_instance_log(catalog, schema_id, head, owners.get)
        assert reduce_instance_log(catalog, schema_id, rest, owners.get, start=started) == whole
