"""A run's table step builds other schemas beside its own (`assets.companions`): in a
live run, every table that only grew; in any run, its batch. Each only once its new
decoded layers passed the blocking check, which the run's own check step makes for them:
a companion whose messages fail the model is left to its own run, whose check blocks it.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import dagster as dg
import psycopg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from p2panda_assets.defs.assets import BATCH_TAG, THROUGH_TAG, family
from p2panda_assets.defs.checks import checks, decoded_messages_match_their_model
from p2panda_assets.engine.corpus import reduce_corpus
from p2panda_assets.pipeline.columnar.layers import decoded_layers
from p2panda_assets.pipeline.spark.session import build_session
from p2panda_assets.store.checked_layers import checked_layers
from p2panda_assets.store.database import DATABASE_URL_ENV, connect
from p2panda_assets.testing.builder import (
    CorpusBuilder,
    InstanceAuthor,
    SchemaAuthor,
    create_field,
    instances,
)
from tests.automation.family_runs import family_resources, fresh_store
from tests.automation.store import publish
from tests.pipeline.compare import engine_tables, pg_tables

pytestmark = [pytest.mark.spark, pytest.mark.postgres]

LIVE = {THROUGH_TAG: "1000000"}  # as the listener and the entries sensor tag their runs


@dataclass
class Two:
    """Two unrelated schemas, `note(title)` and `tag(label)`, both built; then a new note
    and a new tag published (not indexed yet)."""

    url: str
    instance: dg.DagsterInstance
    resources: dict[str, object]
    corpus: CorpusBuilder
    note: SchemaAuthor
    tag: SchemaAuthor

    @property
    def ids(self) -> list[str]:
        return [self.note.schema_id, self.tag.schema_id]

    def connect(self) -> psycopg.Connection:
        return connect(self.url, autocommit=True)

    def run(
        self,
        schema: SchemaAuthor,
        tags: dict[str, str] | None = None,
        selection: dg.AssetSelection | None = None,
    ) -> dg.ExecuteInProcessResult:
        return dg.materialize(
            [*family, *checks],
            selection=selection or dg.AssetSelection.all(),
            partition_key=schema.schema_id,
            instance=self.instance,
            resources=self.resources,
            tags=tags,
            raise_on_error=False,
        )

    def tables(self) -> dict[str, list[tuple]]:
        with self.connect() as conn:
            return pg_tables(conn, self.ids)

    def engine(self, pairs: list[tuple[bytes, bytes]]) -> dict[str, list[tuple]]:
        return engine_tables(reduce_corpus(pairs, set(self.ids)))


def decoded_check(result: dg.ExecuteInProcessResult) -> dg.AssetCheckEvaluation:
    (found,) = [
        e
        for e in result.get_asset_check_evaluations()
        if e.check_name == decoded_messages_match_their_model.check_key.name
    ]
    return found


@pytest.fixture
def two(spark, session_database: str, tmp_path) -> Iterator[Two]:
    with pytest.MonkeyPatch.context() as env, dg.instance_for_test() as instance:
        env.setenv("P2PANDA_HOME", str(tmp_path / "home"))
        env.setenv(DATABASE_URL_ENV, session_database)
        corpus = CorpusBuilder()
        owner = corpus.author(31)
        note = owner.schema(80, "note")
        note.migrate(create_field("title", "varchar"))
        tag = owner.schema(81, "tag")
        tag.migrate(create_field("label", "text"))
        writer: InstanceAuthor = instances(corpus.author(32), 1)  # a log per schema
        tagger: InstanceAuthor = instances(corpus.author(33), 1)
        writer.create(note.ref(), title="one")
        tagger.create(tag.ref(), label="red")
        fresh_store(session_database, corpus.pairs, note.schema_id, tag.schema_id)
        instance.add_dynamic_partitions("schemas", [note.schema_id, tag.schema_id])
        resources = family_resources(session_database)
        two = Two(session_database, instance, resources, corpus, note, tag)
        for schema in (note, tag):
            assert two.run(schema).success
        built = len(corpus.pairs)
        writer.create(note.ref(), title="two")
        tagger.create(tag.ref(), label="blue")
        with two.connect() as conn:
            publish(conn, corpus.pairs[built:])
        yield two


def test_a_live_run_builds_every_table_that_only_grew(two: Two) -> None:
    result = two.run(two.note, LIVE)
    assert result.success
    assert decoded_check(result).metadata["companions"].value == {"tag": "passed"}
    assert two.tables() == two.engine(two.corpus.pairs)  # the new tag too
    with two.connect() as conn:
        assert set(decoded_layers(build_session(), conn, two.tag.schema_id)) == checked_layers(
            conn, two.tag.schema_id
        )
    # The tag's own run later: its layers passed already, its table is as built.
    later = two.run(two.tag, LIVE)
    assert later.success
    assert decoded_check(later).metadata["layers_read"].value == 0
    assert two.tables() == two.engine(two.corpus.pairs)


def test_a_run_not_live_builds_its_own_table_alone(two: Two) -> None:
    assert two.run(two.note).success
    without_new_tag = [pair for pair in two.corpus.pairs if pair != two.corpus.pairs[-1]]
    assert two.tables() == two.engine(without_new_tag)


def fail_newest_layer(two: Two, schema: SchemaAuthor) -> None:
    """The schema's newest decoded layer rewritten with every seq 0: the model's
    `seq >= 1` fails on it."""
    with two.connect() as conn:
        *_, newest = decoded_layers(build_session(), conn, schema.schema_id).values()
    path = Path(newest.removeprefix("file:"))
    table = pq.read_table(path)
    shutil.rmtree(path)
    path.mkdir()
    index = table.schema.get_field_index("seq")
    zeros = pa.array([Decimal(0)] * table.num_rows, table.schema.field("seq").type)
    pq.write_table(table.set_column(index, "seq", zeros), path / "part-0.parquet")


@pytest.mark.parametrize("tags", [LIVE, "batch"], ids=["live", "batch"])
def test_a_companion_whose_messages_fail_the_model_is_left_to_its_own_run(
    two: Two, tags: dict[str, str] | str
) -> None:
    """The new tag's layer fails the model: the note's run builds its own table and not
    the tag's, as a live run (the tag only grew) or with the tag in its batch; the tag's
    own run then fails its blocking check, and its table stays as it was."""
    run_tags = {BATCH_TAG: ",".join(two.ids)} if tags == "batch" else tags
    assert isinstance(run_tags, dict)
    assert two.run(two.note, selection=dg.AssetSelection.assets("raw_entries")).success
    fail_newest_layer(two, two.tag)
    before = two.engine(two.corpus.pairs[:-2])  # as built, without the new note and tag

    result = two.run(two.note, run_tags)
    assert result.success
    assert decoded_check(result).metadata["companions"].value == {
        "tag": "failed: its own run's check says how"
    }
    tables = two.tables()
    assert tables[two.tag.schema_id] == before[two.tag.schema_id]
    assert tables[two.note.schema_id] == two.engine(two.corpus.pairs)[two.note.schema_id]

    own = two.run(two.tag, run_tags)
    assert not own.success
    assert not decoded_check(own).passed
    assert two.tables()[two.tag.schema_id] == before[two.tag.schema_id]
