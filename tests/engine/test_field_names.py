"""Field names (rules M-RESERVED-NAME, M-CASE): PostgreSQL's system column names are invalid
(`bad-field-name`), and names are case-sensitive: `a` and `A` are two fields, two values
in every row and two columns."""

from __future__ import annotations

import pytest

from p2panda_assets.engine.corpus import State, reduce_corpus
from p2panda_assets.engine.lens import EMPTY_LENS
from p2panda_assets.engine.preview import row_json
from p2panda_assets.engine.schema_log import apply_migration
from p2panda_assets.errors import P2pandaError, Reason
from p2panda_assets.protocol.cbor import encode_cbor
from p2panda_assets.protocol.fieldtypes import FieldType
from p2panda_assets.protocol.messages import FieldChange, SchemaMigration
from p2panda_assets.testing.builder import CorpusBuilder, create_field, instances, remove_field

SYSTEM_COLUMNS = ["tableoid", "xmin", "cmin", "xmax", "cmax", "ctid"]


def raw_migration(*names: str) -> bytes:
    """A schema-migration creating text fields `names`, encoded by hand (the builder
    refuses to encode an invalid message)."""
    changes = [{"name": n, "action": "create", "type": "text"} for n in names]
    return encode_cbor({"kind": "schema-migration", "fields": changes})


@pytest.mark.parametrize("name", SYSTEM_COLUMNS)
def test_a_migration_creating_a_system_column_name_is_rejected_with_bad_field_name(
    name: str,
) -> None:
    corpus = CorpusBuilder()
    schema = corpus.author(1).schema(5, "mail")
    schema.migrate(create_field("subject", "text"))  # 2
    bad = schema.raw(raw_migration("body", name))  # 3: rejected, freezes the schema at 2
    later = schema.migrate(create_field("body", "text"))  # 4: rejected with it
    result = reduce_corpus(corpus.pairs)
    history = result.histories[schema.schema_id]
    assert history.rejected[bad].reason is Reason.BAD_FIELD_NAME
    assert name in history.rejected[bad].message
    assert later in history.rejected
    assert list(history.lens) == ["subject"]
    assert result.counts(schema.schema_id)[State.REJECTED] == 2


@pytest.mark.parametrize("name", SYSTEM_COLUMNS)
def test_the_engine_refuses_a_system_column_name_built_in_code(name: str) -> None:
    """A `FieldChange` made in code never went through the decoder; the fold checks too."""
    migration = SchemaMigration((FieldChange(name, "create", FieldType.parse("text")),))
    with pytest.raises(P2pandaError) as caught:
        apply_migration(EMPTY_LENS, migration, 2)
    assert caught.value.reason is Reason.BAD_FIELD_NAME


def test_fields_a_and_capital_a_are_two_fields_and_two_values() -> None:
    corpus = CorpusBuilder()
    schema = corpus.author(1).schema(5, "cases")
    schema.migrate(create_field("a", "text"), create_field("A", "integer", default=0))  # 2
    schema.migrate(create_field("CTID", "text", default="upper case is a name"))  # 3
    alice = instances(corpus.author(2), 1)
    one = alice.create(schema.ref(2), a="lower", A=1)
    two = alice.create(schema.ref(3), A=2)
    alice.update(schema.ref(3), one, A=10)
    result = reduce_corpus(corpus.pairs)
    table = result.tables[schema.schema_id]
    lens = table.history.lens
    assert list(lens) == ["a", "A", "CTID"]
    assert (lens["a"].type, lens["A"].type) == (FieldType.parse("text"), FieldType.parse("integer"))
    rows = {r.instance_id: r.values for r in table.rows}
    assert rows == {
        one: {"a": "lower", "A": 10, "CTID": "upper case is a name"},
        two: {"a": None, "A": 2, "CTID": "upper case is a name"},
    }
    previewed = row_json(table, next(r for r in table.rows if r.instance_id == one))
    assert (previewed["a"], previewed["A"]) == ("lower", 10)
    schema.migrate(remove_field("A"))  # 4: removing `A` leaves `a` alone
    table = reduce_corpus(corpus.pairs).tables[schema.schema_id]
    assert list(table.history.lens) == ["a", "CTID"]
    assert {r.instance_id: r.values["a"] for r in table.rows} == {one: "lower", two: None}


def test_a_and_capital_a_in_one_migration_are_no_duplicate() -> None:
    migration = SchemaMigration(
        (
            FieldChange("a", "create", FieldType.parse("text")),
            FieldChange("A", "create", FieldType.parse("text")),
        )
    )
    assert list(apply_migration(EMPTY_LENS, migration, 2)) == ["a", "A"]
    twice = SchemaMigration((*migration.fields, FieldChange("a", "remove")))
    with pytest.raises(P2pandaError) as caught:
        apply_migration(EMPTY_LENS, twice, 2)
    assert caught.value.reason is Reason.DUPLICATE_FIELD_CHANGE
