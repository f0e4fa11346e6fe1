"""A pending message holds back only its own instance (rules I-PENDING-2, I-PENDING-3): the
later messages of its log that concern the same instance wait with it, in log order;
every other message of the log applies; a delete never waits, and supersedes what was
pending for the instance it deletes."""

from __future__ import annotations

from p2panda_assets.engine.corpus import (
    Catalog,
    Corpus,
    State,
    chain_log,
    check_record,
    instance_accounts,
    reduce_corpus,
    reduce_instance_log,
    reduction_accounts,
)
from p2panda_assets.errors import Reason
from p2panda_assets.protocol.messages import (
    Create,
    SchemaHashRef,
    SchemaVersionRef,
    encode_message,
)
from p2panda_assets.testing.builder import (
    CorpusBuilder,
    create_field,
    instances,
)
from tests.engine.slothmail import rows, slothmail

UNKNOWN_VERSION_HASH = b"\x00\x20" + b"\x5a" * 32  # a schema version nobody published


def state(result: Corpus, entry_hash: bytes) -> State:
    return result.accounts[entry_hash].state


def assert_every_entry_accounted_once(result: Corpus, corpus: CorpusBuilder) -> None:
    assert len(result.accounts) == len(corpus.pairs)
    assert sum(sum(result.counts(s).values()) for s in result.histories) == len(corpus.pairs)


def test_pending_create_holds_back_only_its_own_instance(corpus) -> None:
    schema = slothmail(corpus)
    alice = instances(corpus.author(2), 1)
    before = alice.create(schema.ref(2), subject="before")
    never = alice.create(schema.ref(9), subject="at a version that never arrives")
    held = alice.update(schema.ref(2), never, body="waits for its create")
    alice.update(schema.ref(2), before, body="changed after the pending create")
    after = alice.create(schema.ref(2), subject="after")
    alice.update(schema.ref(2), after, subject="after, changed")
    result = reduce_corpus(corpus.pairs)
    assert rows(result, schema) == {
        before: {"subject": "before", "body": "changed after the pending create"},
        after: {"subject": "after, changed", "body": None},
    }
    for pending in (never, held):
        assert state(result, pending) is State.PENDING
        assert result.accounts[pending].reason is Reason.AWAITING_VERSION
        assert "version 9" in result.accounts[pending].message  # what it waits for
    counts = result.counts(schema.schema_id)
    assert counts[State.PENDING] == 2 and counts[State.REJECTED] == 0
    assert_every_entry_accounted_once(result, corpus)


def test_a_create_naming_an_unknown_version_hash_holds_back_only_its_own_instance(
    corpus,
) -> None:
    schema = slothmail(corpus)
    alice = instances(corpus.author(2), 1)
    first = alice.create(schema.ref(2), subject="first")
    by_hash = alice.raw(  # a create naming a version hash that is not known
        encode_message(Create(SchemaHashRef(UNKNOWN_VERSION_HASH), (("subject", "?"),)))
    )
    last = alice.create(schema.ref(2), subject="last")
    result = reduce_corpus(corpus.pairs)
    assert set(rows(result, schema)) == {first, last}
    assert result.accounts[by_hash].reason is Reason.AWAITING_VERSION


def test_a_pending_update_holds_back_only_its_own_instance(corpus) -> None:
    schema = slothmail(corpus)
    alice = instances(corpus.author(2), 1)
    x = alice.create(schema.ref(2), subject="x")
    y = alice.create(schema.ref(2), subject="y")
    x_early = alice.update(schema.ref(3), x, subject="x at version 3")
    x_held = alice.update(schema.ref(2), x, subject="x after it")
    z = alice.create(schema.ref(2), subject="z, created after it")
    y_update = alice.update(schema.ref(2), y, subject="y, changed after it")
    result = reduce_corpus(corpus.pairs)
    assert rows(result, schema) == {
        x: {"subject": "x", "body": None},
        y: {"subject": "y, changed after it", "body": None},
        z: {"subject": "z, created after it", "body": None},
    }
    assert {state(result, h) for h in (x_early, x_held)} == {State.PENDING}
    assert {state(result, h) for h in (z, y_update)} == {State.APPLIED}
    assert state(result, y) is State.APPLIED
    assert_every_entry_accounted_once(result, corpus)
    schema.migrate(create_field("tag", "text"))  # version 3 arrives
    result = reduce_corpus(corpus.pairs)
    # the held ones apply in log order: the later update of x wins
    assert rows(result, schema)[x] == {"subject": "x after it", "body": None, "tag": None}
    assert state(result, x_early) is State.SUPERSEDED
    assert state(result, x_held) is State.APPLIED
    assert result.counts(schema.schema_id)[State.PENDING] == 0


def test_a_delete_after_a_pending_update_deletes_the_instance_and_supersedes_the_update(
    corpus,
) -> None:
    schema = slothmail(corpus)
    alice = instances(corpus.author(2), 1)
    x = alice.create(schema.ref(2), subject="x")
    pending = alice.update(schema.ref(3), x, subject="x at version 3")
    held = alice.update(schema.ref(2), x, body="held behind it")
    delete = alice.delete(x, schema.ref(2))
    too_late = alice.update(schema.ref(2), x, subject="after the delete")
    kept = alice.create(schema.ref(2), subject="kept")
    result = reduce_corpus(corpus.pairs)
    assert set(rows(result, schema)) == {kept}
    assert state(result, delete) is State.APPLIED
    assert {state(result, h) for h in (x, pending, held)} == {State.SUPERSEDED}
    assert result.accounts[too_late].reason is Reason.INSTANCE_DELETED
    assert result.counts(schema.schema_id)[State.PENDING] == 0
    assert_every_entry_accounted_once(result, corpus)
    schema.migrate(create_field("tag", "text"))  # version 3 arrives: nothing changes
    after = reduce_corpus(corpus.pairs)
    assert set(rows(after, schema)) == {kept}
    assert {h: a.state for h, a in after.accounts.items() if h in result.accounts} == {
        h: a.state for h, a in result.accounts.items()
    }


def test_a_delete_after_a_pending_create_deletes_the_instance_it_would_create(corpus) -> None:
    profile = corpus.author(1).schema(20, "profile")
    profile.migrate(create_field("name", "varchar"))  # 2
    mail = corpus.author(1).schema(21, "mail")
    mail.migrate(create_field("to", "relation", schema=profile.log_ref, cascade=True))
    alice = corpus.author(2)
    profiles = instances(alice, 1)
    panda = profiles.create(profile.ref(3), name="panda")  # version 3: not yet
    held = profiles.update(profile.ref(2), panda, name="held")
    delete = profiles.delete(panda, profile.ref(2))
    too_late = profiles.update(profile.ref(2), panda, name="after the delete")
    sloth = profiles.create(profile.ref(2), name="sloth")
    letters = instances(alice, 2)
    to_panda = letters.create(mail.ref(), to=panda)
    to_sloth = letters.create(mail.ref(), to=sloth)
    result = reduce_corpus(corpus.pairs)
    assert set(rows(result, profile)) == {sloth}
    assert set(rows(result, mail)) == {to_sloth}  # the deleted panda cascades
    assert state(result, delete) is State.APPLIED
    assert {state(result, h) for h in (panda, held)} == {State.SUPERSEDED}
    assert result.accounts[too_late].reason is Reason.INSTANCE_DELETED
    assert state(result, to_panda) is State.SUPERSEDED
    assert result.counts(profile.schema_id)[State.PENDING] == 0
    assert_every_entry_accounted_once(result, corpus)
    profile.migrate(create_field("bio", "text"))  # version 3 arrives: same end state
    after = reduce_corpus(corpus.pairs)
    assert set(rows(after, profile)) == {sloth}
    assert set(rows(after, mail)) == {to_sloth}
    assert {state(after, h) for h in (panda, held)} == {State.SUPERSEDED}
    assert after.accounts[too_late].reason is Reason.INSTANCE_DELETED


def test_a_delete_does_not_wait_for_a_version_of_its_own_schema(corpus) -> None:
    schema = slothmail(corpus)
    other = corpus.author(1).schema(13, "other")
    alice = instances(corpus.author(2), 1)
    x = alice.create(schema.ref(2), subject="x")
    y = alice.create(schema.ref(2), subject="y")
    delete = alice.delete(x, schema.ref(7))  # version 7 of its own schema: not known
    mixed = alice.delete(y, SchemaVersionRef(other.owner.key_pair.public_key, 13, 7))
    result = reduce_corpus(corpus.pairs)
    assert set(rows(result, schema)) == {y}
    assert state(result, delete) is State.APPLIED
    assert result.accounts[mixed].reason is Reason.MIXED_LOG


def test_a_delete_naming_an_unknown_version_hash_waits_and_holds_back_its_instance(
    corpus,
) -> None:
    schema = slothmail(corpus)
    alice = instances(corpus.author(2), 1)
    x = alice.create(schema.ref(2), subject="x")
    delete = alice.delete(x, SchemaHashRef(UNKNOWN_VERSION_HASH))  # type: ignore[arg-type]
    held = alice.update(schema.ref(2), x, subject="behind the delete")
    y = alice.create(schema.ref(2), subject="y")
    result = reduce_corpus(corpus.pairs)
    assert set(rows(result, schema)) == {x, y}
    assert rows(result, schema)[x]["subject"] == "x"
    assert result.accounts[delete].reason is Reason.AWAITING_VERSION
    assert result.accounts[held].state is State.PENDING
    assert_every_entry_accounted_once(result, corpus)


def test_the_reduction_of_one_log_accounts_for_superseded_pending_messages(corpus) -> None:
    """The pipeline reduces each log apart (`reduce_instance_log`) and takes its accounts
    from `reduction_accounts` and the instances: those alone give every entry of the log
    exactly one account, the superseded pending ones included."""
    schema = slothmail(corpus)
    alice = instances(corpus.author(2), 1)
    x = alice.create(schema.ref(2), subject="x")
    pending = alice.update(schema.ref(3), x, subject="later")
    held = alice.update(schema.ref(2), x, body="held")
    delete = alice.delete(x)
    never = alice.create(schema.ref(4), subject="never")
    gone = alice.update(schema.ref(2), never, body="held, then deleted")
    gone_delete = alice.delete(never)
    waiting = alice.create(schema.ref(4), subject="still waiting")
    live = alice.create(schema.ref(2), subject="live")
    by_log: dict[tuple[bytes, int], list] = {}
    for raw, payload in corpus.pairs:
        checked = check_record(raw, payload)
        assert checked.log is not None and checked.entry is not None
        by_log.setdefault(checked.log, []).append((checked.entry, payload))
    logs = {key: chain_log(*key, entries) for key, entries in by_log.items()}
    schema_key = (schema.owner.key_pair.public_key, schema.log_id)
    catalog = Catalog.build([logs[schema_key]], None)
    owners = {h: key for key, log in logs.items() for _, h, _ in log.items}
    alice_log = logs[(alice.owner.key_pair.public_key, 1)]
    reduction = reduce_instance_log(catalog, schema.schema_id, alice_log, owners.get)
    assert sorted(reduction.superseded) == sorted([pending, held, gone])
    accounts = reduction_accounts(reduction, schema.schema_id)
    lens = catalog.histories[schema.schema_id].lens
    for instance in reduction.instances.values():
        overlap = accounts.keys() & set(instance.messages)
        assert not overlap  # one source per entry: no account is written twice
        accounts.update(instance_accounts(instance, lens, schema.schema_id))
    assert {h: a.state for h, a in accounts.items()} == {
        x: State.SUPERSEDED,
        pending: State.SUPERSEDED,
        held: State.SUPERSEDED,
        delete: State.APPLIED,
        never: State.SUPERSEDED,
        gone: State.SUPERSEDED,
        gone_delete: State.APPLIED,
        waiting: State.PENDING,
        live: State.APPLIED,
    }
    assert accounts == {
        h: a for h, a in reduce_corpus(corpus.pairs).accounts.items() if h in accounts
    }
