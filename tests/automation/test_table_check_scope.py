"""The lens check reads what changed: in a run that built its table incrementally, the
rows written since the table last passed; on its own, after a failure or after a whole
build (a new relation), every row (`defs.checks.table.check_scope`)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import dagster as dg
import psycopg
import pytest

from p2panda_assets.defs.assets import family
from p2panda_assets.defs.checks import checks, table_matches_the_current_lens
from p2panda_assets.store.checked_tables import checked_table
from p2panda_assets.store.database import DATABASE_URL_ENV, connect
from p2panda_assets.store.registry import table_name_for
from p2panda_assets.testing.builder import (
    CorpusBuilder,
    InstanceAuthor,
    SchemaAuthor,
    create_field,
    instances,
)
from tests.automation.family_runs import family_resources, fresh_store
from tests.automation.store import publish

pytestmark = [pytest.mark.spark, pytest.mark.postgres]

WHOLE = "the whole table"


@dataclass
class Notes:
    """One schema, `note(title varchar)`, three notes of it materialized through Dagster;
    `published`: how many of the corpus's pairs the store holds."""

    url: str
    instance: dg.DagsterInstance
    resources: dict[str, object]
    corpus: CorpusBuilder
    schema: SchemaAuthor
    writer: InstanceAuthor
    published: int

    def connect(self) -> psycopg.Connection:
        return connect(self.url, autocommit=True)

    def publish_new(self) -> None:
        with self.connect() as conn:
            publish(conn, self.corpus.pairs[self.published :])
        self.published = len(self.corpus.pairs)

    def lens_check(self, *, build: bool) -> dg.AssetCheckEvaluation:
        """The check in a run of the family (which builds the table first) or alone
        (with the plan only: a run of checks alone names no partition)."""
        selection = (
            dg.AssetSelection.all()
            if build
            else dg.AssetSelection.assets("migration_plan")
            | dg.AssetSelection.checks(table_matches_the_current_lens)
        )
        result = dg.materialize(
            [*family, *checks],
            selection=selection,
            partition_key=self.schema.schema_id,
            instance=self.instance,
            resources=self.resources,
            raise_on_error=False,
        )
        (found,) = [
            e
            for e in result.get_asset_check_evaluations()
            if e.check_name == table_matches_the_current_lens.check_key.name
        ]
        return found

    def tamper(self, statement: str) -> None:
        with self.connect() as conn:
            conn.execute(statement.format(table=table_name_for(self.schema.schema_id)))


@pytest.fixture
def notes(spark, session_database: str, tmp_path) -> Iterator[Notes]:
    with pytest.MonkeyPatch.context() as env, dg.instance_for_test() as instance:
        env.setenv("P2PANDA_HOME", str(tmp_path / "home"))
        env.setenv(DATABASE_URL_ENV, session_database)
        corpus = CorpusBuilder()
        schema = corpus.author(21).schema(70, "note")
        schema.migrate(create_field("title", "varchar"))
        writer = instances(corpus.author(22), 1)
        for title in ("one", "two", "three"):
            writer.create(schema.ref(), title=title)
        fresh_store(session_database, corpus.pairs, schema.schema_id)
        instance.add_dynamic_partitions("schemas", [schema.schema_id])
        resources = family_resources(session_database)
        yield Notes(
            session_database, instance, resources, corpus, schema, writer, len(corpus.pairs)
        )


def test_a_run_that_adds_rows_checks_those_rows(notes: Notes) -> None:
    first = notes.lens_check(build=True)
    assert first.passed, first.description
    assert first.metadata["checked"].value == WHOLE
    assert first.metadata["rows_checked"].value == 3
    # An old row made bad in place: only a check that reads it can tell.
    notes.tamper("UPDATE {table} SET _seq = 0 WHERE title = 'one'")
    notes.writer.create(notes.schema.ref(), title="four")
    notes.publish_new()
    live = notes.lens_check(build=True)
    assert live.passed, live.description
    assert live.metadata["checked"].value.startswith("the rows written since it last passed")
    assert live.metadata["rows_checked"].value == 1  # "four", built incrementally
    # On its own, the check reads every row, and the record of the pass is dropped.
    alone = notes.lens_check(build=False)
    assert not alone.passed
    assert alone.metadata["checked"].value == WHOLE
    assert alone.metadata["failing_rows"].value == {"_seq: greater_than_or_equal_to(1)": 1}
    with notes.connect() as conn:
        assert checked_table(conn, notes.schema.schema_id) is None
    # So the next run's check reads every row too, however little it built.
    notes.writer.create(notes.schema.ref(), title="five")
    notes.publish_new()
    after_failure = notes.lens_check(build=True)
    assert not after_failure.passed
    assert after_failure.metadata["rows_checked"].value == 5
    notes.tamper("UPDATE {table} SET _seq = 1 WHERE title = 'one'")
    assert notes.lens_check(build=False).passed


def test_a_whole_build_is_checked_whole(notes: Notes) -> None:
    """A migration builds the table whole, into a new relation: its check reads every
    row, though the relation before passed."""
    assert notes.lens_check(build=True).passed
    with notes.connect() as conn:
        before = checked_table(conn, notes.schema.schema_id)
    notes.schema.migrate(create_field("body", "text"))
    notes.publish_new()
    rebuilt = notes.lens_check(build=True)
    assert rebuilt.passed, rebuilt.description
    assert (rebuilt.metadata["checked"].value, rebuilt.metadata["rows_checked"].value) == (
        WHOLE,
        3,
    )
    with notes.connect() as conn:
        after = checked_table(conn, notes.schema.schema_id)
    assert before is not None and after is not None
    assert after.relation != before.relation and after.through > before.through
