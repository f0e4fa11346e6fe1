"""One schema's failed build does not stop the others (through the real `panda`
commands, Dagster and Spark): a table that cannot be swapped (a user's view depends on
it) keeps its old rows, its registry row says `failed` and why, `panda status` shows it,
the other schemas are built (here by adding what is new to their tables), and `panda
materialize` ends with one `error:` line for it and exit 1. Once the obstacle is gone,
the next run builds it."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from p2panda_assets.jsonlines import entry_line
from p2panda_assets.store.registry import table_name_for
from p2panda_assets.testing.builder import CorpusBuilder, create_field, instances
from tests.coordination.story import ok, panda_runner

pytestmark = [pytest.mark.spark, pytest.mark.postgres, pytest.mark.e2e]


def write(path: Path, corpus: CorpusBuilder) -> Path:
    path.write_text("".join(entry_line(e, p) + "\n" for e, p in corpus.pairs))
    return path


def rows(conn: psycopg.Connection, schema_id: str) -> int:
    schema, table = table_name_for(schema_id).split(".")
    query = sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(schema, table))
    return conn.execute(query).fetchone()[0]


# What a user builds on the product's relations, and how it goes: a view of their own on
# the table, or a function of the API view's row type (a computed column of PostGraphile
# or PostgREST: dropping the view it depends on failed every schema's swap).
OBSTACLES = {
    "a view on the table": (
        "CREATE VIEW public.my_notes AS SELECT * FROM {table}",
        "DROP VIEW public.my_notes",
        "my_notes",
    ),
    "a computed column of the API view": (
        "CREATE FUNCTION public.note_shout(n p2panda_api.note) RETURNS text"
        " LANGUAGE sql STABLE AS 'SELECT upper(n.title)'",
        "DROP FUNCTION public.note_shout(p2panda_api.note)",
        "p2panda_api.note",
    ),
}


@pytest.mark.parametrize("obstacle", sorted(OBSTACLES))
def test_a_schema_whose_swap_fails_is_failed_and_the_others_are_built(
    database_url, p2panda_home, tmp_path, capsys, obstacle: str
) -> None:
    create, drop, named = OBSTACLES[obstacle]
    panda = panda_runner(capsys)
    corpus = CorpusBuilder()
    notes = corpus.author(1).schema(1, "note")
    notes.migrate(create_field("title", "text"))
    tags = corpus.author(1).schema(2, "tag")
    tags.migrate(create_field("label", "varchar"))
    writer = corpus.author(2)
    note_log, tag_log = instances(writer, 1), instances(writer, 2)
    note_log.create(notes.ref(), title="first")
    tag_log.create(tags.ref(), label="first")
    ok(panda("ingest", write(tmp_path / "one.jsonl", corpus)))
    for schema in (notes, tags):
        author_hex, log_id = schema.schema_id.rsplit("-", 1)
        ok(panda("register", author_hex, log_id))
    ok(panda("materialize"))

    # A new field: the notes table is built whole and swapped (an increment that only
    # adds rows would not need the swap the view blocks).
    notes.migrate(create_field("body", "text", default=""))
    note_log.create(notes.ref(), title="second", body="b")
    tag_log.create(tags.ref(), label="second")
    ok(panda("ingest", write(tmp_path / "two.jsonl", corpus)))
    with psycopg.connect(database_url, autocommit=True) as conn:
        schema, table = table_name_for(notes.schema_id).split(".")
        conn.execute(sql.SQL(create).format(table=sql.Identifier(schema, table)))
    code, out, err = panda("materialize")
    assert code == 1
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, err
    assert errors[0].startswith(f"error: internal: {notes.schema_id}: swap failed:")
    assert named in errors[0]  # PostgreSQL's own words: what depends on the table
    assert "Traceback" not in err
    assert tags.schema_id in out
    with psycopg.connect(database_url, autocommit=True) as conn:
        assert rows(conn, notes.schema_id) == 1  # the old table, whole
        assert rows(conn, tags.schema_id) == 2
        status, message = conn.execute(
            "SELECT status, status_message FROM p2panda.schemas WHERE schema_id = %s",
            (notes.schema_id,),
        ).fetchone()
        assert status == "failed" and message.startswith("internal: swap failed:")
        stages = conn.execute("SELECT count(*) FROM pg_tables WHERE tablename LIKE 'stage_%'")
        assert stages.fetchone()[0] == 0
    shown = ok(panda("status"))
    assert f"failed {notes.schema_id}: internal: swap failed:" in shown

    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(drop)
    ok(panda("materialize"))
    with psycopg.connect(database_url, autocommit=True) as conn:
        assert rows(conn, notes.schema_id) == 2
        status = conn.execute(
            "SELECT status FROM p2panda.schemas WHERE schema_id = %s", (notes.schema_id,)
        ).fetchone()[0]
        assert status == "materialized"
