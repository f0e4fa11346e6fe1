"""The compatibility class of migrations (safe: no value can fall back; lossy: some may)
and the counts of values that did fall back."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from p2panda_assets.engine.compatibility import (
    FieldFallbacks,
    Kind,
    classify,
    history_compatibility,
    predict_fallbacks,
    table_fallbacks,
)
from p2panda_assets.engine.conversion import ConversionFailed, convert
from p2panda_assets.engine.corpus import Table, reduce_corpus
from p2panda_assets.engine.schema_log import SchemaHistory
from p2panda_assets.protocol.fieldtypes import FieldType
from p2panda_assets.testing.builder import (
    CorpusBuilder,
    SchemaAuthor,
    create_field,
    instances,
    remove_field,
    update_field,
)
from tests.strategies import TYPES, value_for

SUBJECT_RULE = r"^[^#\r\n].*$"


def history_of(corpus: CorpusBuilder, schema: SchemaAuthor) -> SchemaHistory:
    return reduce_corpus(corpus.pairs).histories[schema.schema_id]


def latest_class(corpus: CorpusBuilder, schema: SchemaAuthor):
    history = history_of(corpus, schema)
    return history_compatibility(history)[history.latest.seq]


def one_field(type_: str, validation: str | None = None) -> tuple[CorpusBuilder, SchemaAuthor]:
    corpus = CorpusBuilder()
    schema = corpus.author(1).schema(5, "things")
    schema.migrate(create_field("f", type_, validation=validation))  # version 2
    return corpus, schema


# --- the slothmail story (resources/) -------------------------------------------------


def test_slothmail_story_creates_and_attachments_are_safe_and_003_is_lossy() -> None:
    corpus = CorpusBuilder()
    owner = corpus.author(1)
    profile = owner.schema(1, "profile")
    profile.migrate(create_field("name", "varchar"))
    attachment = owner.schema(2, "attachment")
    attachment.migrate(create_field("filename", "varchar"), create_field("data", "blob"))
    slothmail = owner.schema(3, "slothmail")
    slothmail.migrate(  # slothmail-001.yaml: version 2
        create_field("subject", "text"),
        create_field("body", "text"),
        create_field("recipient", "relation", schema=profile.log_ref),
        create_field("created", "timestamp"),
    )
    slothmail.migrate(  # slothmail-002.yaml: version 3
        create_field("attachments", "relation[]", schema=attachment.log_ref)
    )
    slothmail.migrate(  # slothmail-003.yaml: version 4
        remove_field("attachments"),
        update_field("subject", "text", "<Subject>", validation=SUBJECT_RULE),
    )
    slothmail.revert(3)  # version 5: no migration, no class
    classes = history_compatibility(history_of(corpus, slothmail))
    assert {seq: c.kind for seq, c in classes.items()} == {
        2: Kind.SAFE,
        3: Kind.SAFE,
        4: Kind.LOSSY,
    }
    assert [c.reason for c in classes[2].changes] == ["adds a field"] * 4
    assert [c.line for c in classes[4].changes] == [
        "attachments: lossy: removes a field (a revert shows it again)",
        r"subject: lossy: tightens validation (adds `^[^#\r\n].*$`)",
    ]


# --- types -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("old", "new"),
    [("integer", "text"), ("varchar", "text"), ("boolean", "integer"), ("text", "text[]")],
)
def test_widening_a_type_is_safe(old: str, new: str) -> None:
    corpus, schema = one_field(old)
    schema.migrate(update_field("f", new, None))
    compatibility = latest_class(corpus, schema)
    assert compatibility.kind == "safe"
    assert compatibility.changes[0].reason == f"widens {old} -> {new} (lossless)"


@pytest.mark.parametrize(
    ("old", "new"),
    [("text", "integer"), ("text", "varchar"), ("float", "integer"), ("text[]", "text")],
)
def test_narrowing_a_type_is_lossy(old: str, new: str) -> None:
    corpus, schema = one_field(old)
    schema.migrate(update_field("f", new, None))
    compatibility = latest_class(corpus, schema)
    assert compatibility.kind == "lossy"
    assert compatibility.changes[0].reason == f"narrows {old} -> {new}"


def test_a_type_change_without_a_conversion_rule_is_lossy_and_says_none_converts() -> None:
    corpus, schema = one_field("boolean")
    schema.migrate(update_field("f", "timestamp", None))
    assert latest_class(corpus, schema).changes[0].reason == (
        "narrows boolean -> timestamp (no value converts)"
    )


# --- validation ---------------------------------------------------------------------


def test_removing_validation_is_safe() -> None:
    corpus, schema = one_field("text", validation="^a")
    schema.migrate(update_field("f", "text", "a"))
    compatibility = latest_class(corpus, schema)
    assert compatibility.kind == "safe"
    assert compatibility.changes[0].reason == "weakens validation (drops `^a`)"


def test_adding_validation_is_lossy() -> None:
    corpus, schema = one_field("text")
    schema.migrate(update_field("f", "text", "a", validation="^a"))
    compatibility = latest_class(corpus, schema)
    assert compatibility.kind == "lossy"
    assert compatibility.changes[0].reason == "tightens validation (adds `^a`)"


def test_keeping_the_same_validation_while_widening_is_safe() -> None:
    corpus, schema = one_field("varchar", validation="^a")
    schema.migrate(update_field("f", "text", "a", validation="^a"))
    compatibility = latest_class(corpus, schema)
    assert compatibility.kind == "safe"
    assert compatibility.changes[0].reason == (
        "widens varchar -> text (lossless); keeps validation `^a`"
    )


def test_a_changed_pattern_is_lossy_even_when_it_accepts_more() -> None:
    """Language inclusion of RE2 patterns is not decided: a change is counted lossy."""
    corpus, schema = one_field("text", validation="^a")
    schema.migrate(update_field("f", "text", "a", validation="^a|^b"))
    compatibility = latest_class(corpus, schema)
    assert compatibility.kind == "lossy"
    assert compatibility.changes[0].reason == "tightens validation (changes `^a` -> `^a|^b`)"


def test_a_pattern_that_was_ignored_by_an_integer_field_tightens_when_it_becomes_text() -> None:
    """Integer values were never checked against the pattern, so as text they may fail."""
    corpus, schema = one_field("integer", validation="^1")
    schema.migrate(update_field("f", "text", "1", validation="^1"))
    compatibility = latest_class(corpus, schema)
    assert compatibility.kind == "lossy"
    assert compatibility.changes[0].reason == (
        "widens integer -> text (lossless); tightens validation (adds `^1`)"
    )


def test_a_validation_on_a_type_it_does_not_apply_to_is_safe() -> None:
    corpus, schema = one_field("integer")
    schema.migrate(update_field("f", "integer", 0, validation="^1"))
    compatibility = latest_class(corpus, schema)
    assert compatibility.kind == "safe"
    assert compatibility.changes[0].reason == "validation `^1` does not apply to integer"


def test_one_lossy_change_makes_the_migration_lossy() -> None:
    corpus, schema = one_field("integer")
    schema.migrate(create_field("g", "text"), remove_field("f"))
    compatibility = latest_class(corpus, schema)
    assert [(c.name, c.kind) for c in compatibility.changes] == [
        ("g", Kind.SAFE),
        ("f", Kind.LOSSY),
    ]
    assert compatibility.kind is Kind.LOSSY


def test_classify_reads_the_lenses_before_and_after_the_migration() -> None:
    corpus, schema = one_field("text")
    schema.migrate(update_field("f", "integer", 0))
    version = history_of(corpus, schema).latest
    assert classify(version.before, version.migration, version.lens).kind is Kind.LOSSY
    assert classify(version.lens, version.migration, version.lens).kind is Kind.SAFE


# --- values that fell back --------------------------------------------------------------

TEXTS = ["1", "42", "-1", "x", "1.5", None]


def test_lossy_narrowing_counts_exactly_the_rows_that_fell_back_to_the_default() -> None:
    corpus, schema = one_field("text")
    alice = instances(corpus.author(2), 1)
    ids = {alice.create(schema.ref(2), f=text): text for text in TEXTS}
    before = reduce_corpus(corpus.pairs).tables[schema.schema_id]
    schema.migrate(update_field("f", "integer", -1))  # version 3
    result = reduce_corpus(corpus.pairs)
    table = result.tables[schema.schema_id]

    def fails(text: str | None) -> bool:
        try:
            convert(text, FieldType.parse("text"), FieldType.parse("integer"))
        except ConversionFailed:
            return True
        return False

    fell_back = [i for i, text in ids.items() if fails(text)]
    assert len(fell_back) == 2  # "x" and "1.5"; null stays null, "-1" is -1 on its own
    values = {row.instance_id: row.values["f"] for row in table.rows}
    assert all(values[i] == -1 for i in fell_back)
    at_default = [i for i, v in values.items() if v == -1]
    assert len(at_default) == 3  # the written "-1" equals the default without falling back
    assert table.fallbacks["f"] == len(fell_back)
    assert predict_fallbacks(before, result.histories[schema.schema_id]) == {"f": 2}
    assert table_fallbacks(table) == {"f": FieldFallbacks("f", 2, len(TEXTS), (3,))}
    assert table_fallbacks(table)["f"].line == "f: 2 of 6 rows fell back (lossy at version 3)"


def test_an_update_message_replaces_a_fallback_and_the_count_drops() -> None:
    corpus, schema = one_field("text")
    alice = instances(corpus.author(2), 1)
    mail = alice.create(schema.ref(2), f="x")
    schema.migrate(update_field("f", "integer", -1))
    alice.update(schema.ref(3), mail, f=7)
    table = reduce_corpus(corpus.pairs).tables[schema.schema_id]
    assert table.fallbacks == {"f": 0}
    assert table_fallbacks(table)["f"].rows == 0


def test_safe_migrations_report_no_field_in_table_fallbacks() -> None:
    corpus, schema = one_field("integer")
    instances(corpus.author(2), 1).create(schema.ref(2), f=5)
    schema.migrate(update_field("f", "text", None), create_field("g", "text"))
    table = reduce_corpus(corpus.pairs).tables[schema.schema_id]
    assert table.fallbacks == {"f": 0, "g": 0}
    assert table_fallbacks(table) == {}


VALIDATIONS = [None, "^a", SUBJECT_RULE]


@st.composite
def one_update(draw: st.DrawFn) -> tuple[CorpusBuilder, SchemaAuthor, Table]:
    """A one-field schema, instances at version 2, and an update of the field (version
    3) to a random type and validation; also the table before the update."""
    corpus, schema = one_field(draw(st.sampled_from(TYPES)), draw(st.sampled_from(VALIDATIONS)))
    old = history_of(corpus, schema).lens["f"].type
    alice = instances(corpus.author(2), 1)
    for value in draw(st.lists(value_for(str(old)), max_size=6)):
        alice.create(schema.ref(2), f=value)
    before = reduce_corpus(corpus.pairs).tables[schema.schema_id]
    new = draw(st.sampled_from(TYPES))
    schema.migrate(
        update_field("f", new, draw(value_for(new)), validation=draw(st.sampled_from(VALIDATIONS)))
    )
    return corpus, schema, before


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(one_update())
def test_no_value_falls_back_at_a_safe_migration_and_the_prediction_is_exact(
    case: tuple[CorpusBuilder, SchemaAuthor, Table],
) -> None:
    """Safe means no value can fall back; and predicting on the rows before the
    migration counts what the reduction then counts."""
    corpus, schema, before = case
    result = reduce_corpus(corpus.pairs)
    history = result.histories[schema.schema_id]
    assume(history.latest.seq == 3)  # a default that does not fit freezes the schema
    table = result.tables[schema.schema_id]
    if latest_class(corpus, schema).kind is Kind.SAFE:
        assert table.fallbacks["f"] == 0
    assert predict_fallbacks(before, history) == {"f": table.fallbacks["f"]}
