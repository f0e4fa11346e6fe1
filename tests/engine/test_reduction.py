"""Reducing instance messages to rows: migration forward, reverts, authorship, logs,
pending, relations and cascades, and the accounting of every entry."""

from __future__ import annotations

import pytest

from p2panda_assets.engine.corpus import Corpus, State, reduce_corpus
from p2panda_assets.errors import Reason
from p2panda_assets.protocol.messages import SchemaMeta, SchemaVersionRef, encode_message
from p2panda_assets.testing.builder import (
    CorpusBuilder,
    create_field,
    instances,
    remove_field,
    update_field,
)
from tests.engine.slothmail import rows, slothmail

SUBJECT_RULE = r"^[^#\r\n].*$"


def account(result: Corpus, entry_hash: bytes):
    return result.accounts[entry_hash]


def test_a_multi_line_subject_from_an_old_version_becomes_the_default(corpus) -> None:
    schema = slothmail(corpus)
    alice = instances(corpus.author(2), 1)
    mail = alice.create(schema.ref(2), subject="Hello!\n...friend", body="hi")
    schema.migrate(update_field("subject", "text", "<Subject>", validation=SUBJECT_RULE))
    result = reduce_corpus(corpus.pairs)
    assert rows(result, schema)[mail] == {"subject": "<Subject>", "body": "hi"}
    assert result.tables[schema.schema_id].fallbacks == {"subject": 1, "body": 0}


def test_a_value_invalid_at_its_own_version_rejects_the_message(corpus) -> None:
    schema = slothmail(corpus)
    schema.migrate(update_field("subject", "text", "<Subject>", validation=SUBJECT_RULE))
    alice = instances(corpus.author(2), 1)
    invalid = alice.create(schema.ref(3), subject="two\nlines")
    wrong_type = alice.create(schema.ref(3), subject=5)
    unknown = alice.create(schema.ref(3), nope="x")
    result = reduce_corpus(corpus.pairs)
    assert account(result, invalid).reason is Reason.VALIDATION_FAILED
    assert account(result, wrong_type).reason is Reason.INVALID_VALUE
    assert account(result, unknown).reason is Reason.UNKNOWN_FIELD
    assert rows(result, schema) == {}


def test_creates_that_omit_a_field_get_its_default_and_old_instances_get_new_fields(
    corpus,
) -> None:
    schema = slothmail(corpus)
    alice = instances(corpus.author(2), 1)
    old = alice.create(schema.ref(2), subject="old")
    schema.migrate(create_field("priority", "integer", default=3))  # 3
    new = alice.create(schema.ref(3), subject="new")
    result = reduce_corpus(corpus.pairs)
    assert rows(result, schema)[old] == {"subject": "old", "body": None, "priority": 3}
    assert rows(result, schema)[new] == {"subject": "new", "body": None, "priority": 3}


def test_types_convert_forward_and_fall_back_where_they_cannot(corpus) -> None:
    schema = corpus.author(1).schema(3)
    schema.migrate(create_field("n", "text"))  # 2
    alice = instances(corpus.author(2), 1)
    number = alice.create(schema.ref(2), n="42")
    word = alice.create(schema.ref(2), n="forty-two")
    schema.migrate(update_field("n", "integer", -1))  # 3
    schema.migrate(update_field("n", "integer[]", ()))  # 4
    result = reduce_corpus(corpus.pairs)
    assert rows(result, schema) == {number: {"n": (42,)}, word: {"n": (-1,)}}


def test_an_update_from_an_old_version_migrates_only_its_own_fields(corpus) -> None:
    schema = slothmail(corpus)
    alice = instances(corpus.author(2), 1)
    mail = alice.create(schema.ref(2), subject="s", body="b")
    schema.migrate(create_field("tag", "varchar", default="none"))  # 3
    alice.update(schema.ref(3), mail, tag="urgent")
    alice.update(schema.ref(2), mail, body="b2")  # an old client, later in the log
    result = reduce_corpus(corpus.pairs)
    row = result.tables[schema.schema_id].rows[0]
    assert row.values == {"subject": "s", "body": "b2", "tag": "urgent"}
    assert (row.version, row.seq) == (2, 3)


def test_a_field_created_again_after_its_removal_starts_afresh(corpus) -> None:
    schema = slothmail(corpus)
    alice = instances(corpus.author(2), 1)
    mail = alice.create(schema.ref(2), subject="kept", body="old body")
    schema.migrate(remove_field("body"))  # 3
    schema.migrate(create_field("body", "text", default="fresh"))  # 4
    result = reduce_corpus(corpus.pairs)
    assert rows(result, schema)[mail] == {"subject": "kept", "body": "fresh"}
    schema.revert(2)  # 5: cuts out the removal; the old value comes back
    assert rows(reduce_corpus(corpus.pairs), schema)[mail] == {
        "subject": "kept",
        "body": "old body",
    }


def test_revert_ignores_creates_and_updates_at_dead_versions_but_applies_deletes(corpus) -> None:
    schema = slothmail(corpus)
    alice = instances(corpus.author(2), 1)
    kept = alice.create(schema.ref(2), subject="kept")
    gone = alice.create(schema.ref(2), subject="gone")
    schema.migrate(create_field("extra", "text"))  # 3
    dead_create = alice.create(schema.ref(3), subject="dead", extra="x")
    dead_update = alice.update(schema.ref(3), kept, subject="changed at a dead version")
    delete = alice.delete(gone, schema.ref(3))
    schema.revert(2)  # 4
    result = reduce_corpus(corpus.pairs)
    assert rows(result, schema) == {kept: {"subject": "kept", "body": None}}
    assert account(result, dead_create).reason is Reason.REVERTED_VERSION
    assert account(result, dead_update).reason is Reason.REVERTED_VERSION
    assert account(result, delete).state is State.APPLIED
    assert account(result, gone).state is State.SUPERSEDED


def test_only_the_author_changes_an_instance(corpus) -> None:
    schema = slothmail(corpus)
    alice, mallory = instances(corpus.author(2), 1), instances(corpus.author(3), 1)
    mail = alice.create(schema.ref(), subject="mine")
    update = mallory.update(schema.ref(), mail, subject="yours now")
    delete = mallory.delete(mail, schema.ref())
    result = reduce_corpus(corpus.pairs)
    assert rows(result, schema)[mail]["subject"] == "mine"
    assert account(result, update).reason is Reason.NOT_AUTHOR
    assert account(result, delete).reason is Reason.NOT_AUTHOR


def test_a_log_holds_the_messages_of_one_schema(corpus) -> None:
    mail, note = slothmail(corpus), corpus.author(1).schema(13, "note")
    note.migrate(create_field("text", "text"))
    alice = instances(corpus.author(2), 1)
    alice.create(mail.ref(), subject="first names slothmail")
    mixed = alice.create(note.ref(), text="another schema in the same log")
    result = reduce_corpus(corpus.pairs)
    assert account(result, mixed).reason is Reason.MIXED_LOG


def test_an_authors_second_log_for_a_schema_is_rejected(corpus) -> None:
    schema = slothmail(corpus)
    bob = corpus.author(2)
    instances(bob, 1).create(schema.ref(), subject="log 1")
    second = instances(bob, 2).create(schema.ref(), subject="log 2")
    result = reduce_corpus(corpus.pairs)
    assert account(result, second).reason is Reason.DUPLICATE_LOG
    assert len(result.tables[schema.schema_id].rows) == 1


def test_updates_and_deletes_of_missing_or_deleted_instances(corpus) -> None:
    schema = slothmail(corpus)
    note = corpus.author(1).schema(13, "note")
    note.migrate(create_field("text", "text"))
    alice = instances(corpus.author(2), 1)
    mail = alice.create(schema.ref(), subject="s")
    nowhere = alice.update(schema.ref(), b"\x00\x20" + b"\x11" * 32, subject="?")
    other_log_instance = instances(corpus.author(2), 2).create(note.ref(), text="a note")
    wrong = alice.update(schema.ref(), other_log_instance, subject="?")
    alice.delete(mail, schema.ref())
    after_delete = alice.update(schema.ref(), mail, subject="too late")
    result = reduce_corpus(corpus.pairs)
    assert account(result, nowhere).reason is Reason.UNKNOWN_INSTANCE
    assert account(result, wrong).reason is Reason.WRONG_SCHEMA
    assert account(result, after_delete).reason is Reason.INSTANCE_DELETED


def test_a_schema_message_on_an_instance_log_is_rejected(corpus) -> None:
    schema = slothmail(corpus)
    alice = instances(corpus.author(2), 1)
    alice.create(schema.ref(), subject="s")
    meta = alice.raw(encode_message(SchemaMeta(name="sneaky", spec=1)))
    assert account(reduce_corpus(corpus.pairs), meta).reason is Reason.NOT_INSTANCE_MESSAGE


def test_a_message_naming_an_unknown_version_waits_with_its_instance_only(corpus) -> None:
    schema = slothmail(corpus)
    alice = instances(corpus.author(2), 1)
    applied = alice.create(schema.ref(2), subject="now")
    early = alice.create(schema.ref(3), subject="from the future")
    held = alice.update(schema.ref(2), early, subject="after it in the log")
    other = alice.create(schema.ref(2), subject="another instance, after it in the log")
    result = reduce_corpus(corpus.pairs)
    assert account(result, applied).state is State.APPLIED
    assert account(result, other).state is State.APPLIED
    assert account(result, early).state is State.PENDING
    assert account(result, early).reason is Reason.AWAITING_VERSION
    assert account(result, held).state is State.PENDING
    assert account(result, held).reason is Reason.AWAITING_VERSION
    assert set(rows(result, schema)) == {applied, other}
    schema.migrate(create_field("tag", "text"))  # version 3 arrives
    result = reduce_corpus(corpus.pairs)
    assert {account(result, h).state for h in (applied, early, held, other)} == {State.APPLIED}
    assert rows(result, schema)[early]["subject"] == "after it in the log"


def test_a_message_naming_a_rejected_version_is_rejected(corpus) -> None:
    schema = slothmail(corpus)
    schema.migrate(create_field("subject", "text"))  # 3: invalid, freezes at 2
    alice = instances(corpus.author(2), 1)
    message = alice.create(schema.ref(3), subject="s")
    assert account(reduce_corpus(corpus.pairs), message).reason is Reason.REJECTED_VERSION


def test_a_message_for_an_unknown_or_unregistered_schema_waits(corpus) -> None:
    schema = slothmail(corpus)
    alice = instances(corpus.author(2), 1)
    message = alice.create(SchemaVersionRef(b"\x07" * 32, 9, 1), subject="?")
    result = reduce_corpus(corpus.pairs)
    assert account(result, message).reason is Reason.AWAITING_SCHEMA
    bob = instances(corpus.author(3), 1)
    waiting = bob.create(schema.ref(), subject="registered later")
    unregistered = reduce_corpus(corpus.pairs, registered=set())
    assert account(unregistered, waiting).state is State.PENDING
    assert schema.schema_id not in unregistered.tables


def relation_pair(corpus: CorpusBuilder, *, cascade: bool):
    profile = corpus.author(1).schema(20, "profile")
    profile.migrate(create_field("name", "varchar"))
    mail = corpus.author(1).schema(21, "mail")
    mail.migrate(create_field("to", "relation", schema=profile.log_ref, cascade=cascade))
    return profile, mail


@pytest.mark.parametrize("cascade", [True, False])
def test_deleting_an_upstream_instance_cascades_only_where_asked(corpus, cascade) -> None:
    profile, mail = relation_pair(corpus, cascade=cascade)
    alice = corpus.author(2)
    panda = instances(alice, 1).create(profile.ref(), name="panda")
    letter = instances(alice, 2).create(mail.ref(), to=panda)
    instances(alice, 1).delete(panda, profile.ref())
    result = reduce_corpus(corpus.pairs)
    assert rows(result, profile) == {}
    expected = {} if cascade else {letter: {"to": panda.hex()}}
    assert rows(result, mail) == expected
    assert result.tables[mail.schema_id].upstream == (profile.schema_id,)


def test_cascades_follow_a_schema_relating_to_itself(corpus) -> None:
    comment = corpus.author(1).schema(30, "comment")
    comment.migrate(create_field("text", "text"))
    comment.migrate(create_field("parent", "relation", schema=comment.log_ref, cascade=True))
    alice = instances(corpus.author(2), 1)
    root = alice.create(comment.ref(), text="root")
    reply = alice.create(comment.ref(), text="reply", parent=root)
    alice.create(comment.ref(), text="reply to reply", parent=reply)
    other = alice.create(comment.ref(), text="unrelated")
    alice.delete(root, comment.ref())
    assert set(rows(reduce_corpus(corpus.pairs), comment)) == {other}


def test_a_schema_waits_for_the_schema_it_relates_to(corpus) -> None:
    profile, mail = relation_pair(corpus, cascade=False)
    result = reduce_corpus(corpus.pairs, registered={mail.schema_id})
    assert mail.schema_id not in result.tables
    assert result.pending[mail.schema_id].reason is Reason.AWAITING_SCHEMA
    result = reduce_corpus(corpus.pairs, registered={mail.schema_id, profile.schema_id})
    assert mail.schema_id in result.tables


def test_a_relation_cycle_is_reported_not_looped_on(corpus) -> None:
    a = corpus.author(1).schema(40, "a")
    b = corpus.author(1).schema(41, "b")
    a.migrate(create_field("to_b", "relation", schema=b.log_ref))
    b.migrate(create_field("to_a", "relation", schema=a.log_ref))
    c = corpus.author(1).schema(42, "c")
    c.migrate(create_field("to_a", "relation", schema=a.log_ref))
    result = reduce_corpus(corpus.pairs)
    assert result.pending[a.schema_id].reason is Reason.RELATION_CYCLE
    assert result.pending[b.schema_id].reason is Reason.RELATION_CYCLE
    assert result.pending[c.schema_id].reason is Reason.AWAITING_SCHEMA
    assert not result.tables


def test_every_entry_is_accounted_for_exactly_once(corpus) -> None:
    schema = slothmail(corpus)
    alice = instances(corpus.author(2), 1)
    mail = alice.create(schema.ref(), subject="s", body="b")
    overwritten = alice.update(schema.ref(), mail, subject="s2")
    alice.update(schema.ref(), mail, subject="s3")
    alice.raw(b"\xff")  # not CBOR
    result = reduce_corpus(corpus.pairs + corpus.pairs[:2])  # and duplicates
    assert result.duplicates == 2
    assert len(result.accounts) == len(corpus.pairs)
    assert account(result, overwritten).state is State.SUPERSEDED
    counts = result.counts(schema.schema_id)
    assert counts == {State.APPLIED: 4, State.SUPERSEDED: 1, State.PENDING: 0, State.REJECTED: 1}
    assert sum(counts.values()) == len(corpus.pairs)


def test_entries_after_a_gap_in_an_instance_log_wait_for_the_missing_entry(corpus) -> None:
    schema = slothmail(corpus)
    alice = instances(corpus.author(2), 1)
    alice.create(schema.ref(), subject="first")
    missing = alice.create(schema.ref(), subject="never arrives")
    after = alice.create(schema.ref(), subject="after the gap")
    pairs = [p for p in corpus.pairs if p[0] != corpus.pairs[-2][0]]
    result = reduce_corpus(pairs)
    assert missing not in result.accounts
    assert account(result, after).state is State.PENDING
    assert account(result, after).reason is Reason.AWAITING_ENTRY
    assert account(result, after).schema_id == schema.schema_id
