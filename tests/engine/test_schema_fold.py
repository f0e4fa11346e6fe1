"""Folding a schema log: versions as lenses, the revert rule, and the freeze."""

from __future__ import annotations

from p2panda_assets.engine.corpus import State, reduce_corpus
from p2panda_assets.engine.schema_log import SchemaHistory
from p2panda_assets.errors import Reason
from p2panda_assets.protocol.fieldtypes import FieldType
from p2panda_assets.protocol.messages import Create, SchemaVersionRef, encode_message
from p2panda_assets.testing.builder import (
    CorpusBuilder,
    SchemaAuthor,
    create_field,
    instances,
    remove_field,
    update_field,
)


def new_schema() -> tuple[CorpusBuilder, SchemaAuthor]:
    corpus = CorpusBuilder()
    return corpus, corpus.author(1).schema(5, "slothmail")


def history_of(corpus: CorpusBuilder, schema: SchemaAuthor) -> SchemaHistory:
    return reduce_corpus(corpus.pairs).histories[schema.schema_id]


def test_each_entry_is_a_version_and_each_version_a_lens() -> None:
    corpus, schema = new_schema()
    schema.migrate(create_field("subject", "text"), create_field("n", "integer", default=0))
    schema.migrate(remove_field("n"))
    history = history_of(corpus, schema)
    assert sorted(history.versions) == [1, 2, 3]
    assert list(history.versions[1].lens) == []
    assert list(history.versions[2].lens) == ["subject", "n"]
    assert history.versions[2].lens["n"].default == 0
    assert list(history.lens) == ["subject"]
    assert history.name == "slothmail"


def test_an_update_describes_the_field_anew_and_keeps_its_place() -> None:
    corpus, schema = new_schema()
    schema.migrate(create_field("a", "text", validation="^x"), create_field("b", "integer"))
    schema.migrate(update_field("a", "varchar", "y"))
    lens = history_of(corpus, schema).lens
    assert list(lens) == ["a", "b"]
    assert lens["a"].type == FieldType.parse("varchar")
    assert lens["a"].validation is None
    assert lens["a"].default == "y"


def test_revert_restores_the_target_lens_and_kills_the_versions_between() -> None:
    corpus, schema = new_schema()
    schema.migrate(create_field("a", "text"))  # 2
    schema.migrate(create_field("b", "text"))  # 3
    schema.migrate(remove_field("a"))  # 4
    schema.revert(2)  # 5
    history = history_of(corpus, schema)
    assert history.dead == {3, 4}
    assert list(history.lens) == ["a"]
    assert [v.seq for v in history.alive_after(1)] == [2, 5]


def test_revert_ignored_when_inner_revert_targets_earlier() -> None:
    corpus, schema = new_schema()
    schema.migrate(create_field("a", "text"))  # 2
    schema.migrate(create_field("b", "text"))  # 3
    schema.revert(2)  # 4: kills 3
    schema.migrate(create_field("c", "text"))  # 5
    schema.revert(3)  # 6: the revert at 4 lies between 3 and 6 and targets 2 < 3
    history = history_of(corpus, schema)
    assert history.versions[6].ignored_revert
    assert history.dead == {3}
    assert list(history.lens) == ["a", "c"]


def test_revert_not_ignored_when_inner_revert_targets_later() -> None:
    corpus, schema = new_schema()
    schema.migrate(create_field("a", "text"))  # 2
    schema.migrate(create_field("b", "text"))  # 3
    schema.migrate(create_field("c", "text"))  # 4
    schema.revert(3)  # 5: kills 4
    schema.revert(2)  # 6: the revert at 5 targets 3 >= 2, so this one counts
    history = history_of(corpus, schema)
    assert not history.versions[6].ignored_revert
    assert history.dead == {3, 4, 5}
    assert list(history.lens) == ["a"]


def test_revert_restores_the_meta_of_its_target() -> None:
    corpus, schema = new_schema()
    schema.migrate(create_field("a", "text"))  # 2
    schema.meta("renamed")  # 3
    schema.revert(2)  # 4
    assert history_of(corpus, schema).name == "slothmail"


def test_a_migration_removing_the_last_field_drops_the_table() -> None:
    """Rule S-DROP (docs/semantics.md): no field left, no table; a revert brings it back."""
    corpus, schema = new_schema()
    schema.migrate(create_field("a", "text"))  # 2
    instances(corpus.author(2), 1).create(schema.ref(2), a="kept")
    schema.migrate(remove_field("a"))  # 3
    assert reduce_corpus(corpus.pairs).tables[schema.schema_id].dropped
    schema.revert(2)  # 4
    table = reduce_corpus(corpus.pairs).tables[schema.schema_id]
    assert not table.dropped
    assert [row.values for row in table.rows] == [{"a": "kept"}]


def freeze_reason(*steps) -> tuple[SchemaHistory, Reason]:
    corpus, schema = new_schema()
    schema.migrate(create_field("a", "text"))  # 2
    for step in steps:
        step(schema)
    schema.migrate(create_field("later", "text"))  # rejected: frozen
    history = history_of(corpus, schema)
    first = min(history.rejected)
    assert history.rejected[schema.version].reason is Reason.SCHEMA_FROZEN
    assert max(history.versions) == first - 1
    return history, history.rejected[first].reason


def test_creating_an_existing_field_freezes_the_schema() -> None:
    assert freeze_reason(lambda s: s.migrate(create_field("a", "text")))[1] is Reason.FIELD_EXISTS


def test_updating_or_removing_a_missing_field_freezes_the_schema() -> None:
    reason = freeze_reason(lambda s: s.migrate(update_field("zz", "text", "d")))[1]
    assert reason is Reason.FIELD_MISSING
    assert freeze_reason(lambda s: s.migrate(remove_field("zz")))[1] is Reason.FIELD_MISSING


def test_a_migration_naming_a_field_twice_is_invalid() -> None:
    reason = freeze_reason(lambda s: s.migrate(create_field("x", "text"), remove_field("x")))[1]
    assert reason is Reason.DUPLICATE_FIELD_CHANGE


def test_a_default_must_convert_and_validate() -> None:
    wrong_type = freeze_reason(lambda s: s.migrate(create_field("x", "integer", default="one")))
    assert wrong_type[1] is Reason.BAD_DEFAULT
    invalid = freeze_reason(
        lambda s: s.migrate(update_field("a", "text", "#no", validation="^[^#]"))
    )
    assert invalid[1] is Reason.BAD_DEFAULT


def test_a_validation_must_be_valid_re2() -> None:
    reason = freeze_reason(lambda s: s.migrate(create_field("x", "text", validation="(a")))[1]
    assert reason is Reason.BAD_VALIDATION
    backreference = freeze_reason(
        lambda s: s.migrate(create_field("x", "text", validation=r"(a)\1"))
    )
    assert backreference[1] is Reason.BAD_VALIDATION


def test_a_revert_must_target_an_earlier_version() -> None:
    assert freeze_reason(lambda s: s.revert(3))[1] is Reason.BAD_REVERT_TARGET
    assert freeze_reason(lambda s: s.revert(0))[1] is Reason.BAD_REVERT_TARGET


def test_an_instance_message_on_a_schema_log_freezes_it() -> None:
    def publish_create(schema: SchemaAuthor) -> None:
        schema.raw(encode_message(Create(schema.ref(), ())))

    assert freeze_reason(publish_create)[1] is Reason.NOT_SCHEMA_MESSAGE


def test_an_undecodable_entry_freezes_the_schema_with_its_cbor_reason() -> None:
    assert freeze_reason(lambda s: s.raw(b"\xa1\x61k"))[1] is Reason.CBOR_MALFORMED
    unknown_type = encode_message(Create(SchemaVersionRef(b"\x01" * 32, 1, 1), ())).replace(
        b"create", b"crXXte"
    )
    assert freeze_reason(lambda s: s.raw(unknown_type))[1] is Reason.UNKNOWN_KIND


def test_frozen_and_rejected_schema_entries_are_accounted_as_rejected() -> None:
    corpus, schema = new_schema()
    schema.migrate(create_field("a", "text"))
    schema.migrate(create_field("a", "text"))
    schema.migrate(create_field("b", "text"))
    result = reduce_corpus(corpus.pairs)
    states = [a.state for a in result.accounts.values()]
    assert states.count(State.APPLIED) == 2
    assert states.count(State.REJECTED) == 2
    assert {a.reason for a in result.accounts.values() if a.reason} == {
        Reason.FIELD_EXISTS,
        Reason.SCHEMA_FROZEN,
    }
