"""Issue 7, coordination: `panda check` / `panda ensure` across rule P-CHECK's outcomes, also
after restoring an older dump; name conflicts resolved by registration, and a held name
qualified; the class of
each migration of the slothmail story, and a lossy one whose fallbacks match the rows."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from pyspark.sql import SparkSession

from p2panda_assets.jsonlines import entry_line
from p2panda_assets.store.embedded import bin_path
from p2panda_assets.store.registry import table_name_for
from p2panda_assets.testing.builder import CorpusBuilder, create_field, instances
from tests.conftest import PRODUCT_SCHEMAS
from tests.coordination.story import Panda, ok, panda_runner, write_story

pytestmark = [pytest.mark.spark, pytest.mark.postgres]


@pytest.fixture
def panda(
    capsys: pytest.CaptureFixture[str],
    spark: SparkSession,
    conn: psycopg.Connection,
    p2panda_home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Panda:
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    return panda_runner(capsys)


def outcome(result: tuple[int, str, str]) -> tuple[int, dict]:
    code, out, err = result
    assert code in (0, 3), err
    return code, json.loads(out)


def dump(url: str, path: Path) -> None:
    schemas = [f"--schema={schema}" for schema in PRODUCT_SCHEMAS]
    subprocess.run(
        [str(bin_path() / "pg_dump"), "--format=custom", *schemas, f"--file={path}", url],
        check=True,
    )


def restore(conn: psycopg.Connection, url: str, path: Path) -> None:
    """As an operator restores a backup of the product's schemas over a newer state."""
    for schema in PRODUCT_SCHEMAS:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    subprocess.run([str(bin_path() / "pg_restore"), f"--dbname={url}", str(path)], check=True)


def test_check_and_ensure_across_the_outcomes_and_after_restoring_an_older_dump(
    panda: Panda, conn: psycopg.Connection, database_url: str, tmp_path: Path
) -> None:
    story = write_story(tmp_path / "scratch")
    story.serve(panda)  # slothmail at version 4
    slothmail = story.slothmail
    backup = tmp_path / "at-version-4.dump"
    dump(database_url, backup)

    # The class of each migration of the story, and the lossy one's fallbacks (v4 makes
    # subject single-line: the multi-line subject falls back to `<Subject>`).
    migrations, fallbacks = conn.execute(
        "SELECT migrations, fallbacks FROM p2panda.schemas WHERE schema_id = %s", (slothmail,)
    ).fetchone()
    assert migrations == {"2": "safe", "3": "safe", "4": "lossy"}
    table = sql.Identifier(*table_name_for(slothmail).split("."))
    defaults = conn.execute(
        sql.SQL("SELECT count(*) FROM {} WHERE subject = '<Subject>'").format(table)
    ).fetchone()[0]
    assert fallbacks["subject"] == defaults == 1
    status = ok(panda("status", "--wide"))
    line = next(line for line in status.splitlines() if line.startswith(slothmail))
    assert line.split()[-4:] == ["2", "1", "1", "slothmail"]  # safe, lossy, fallbacks, view

    story.revert()  # version 5: back to 3, version 4 dead
    story.serve(panda)
    hash_of_5 = conn.execute(
        "SELECT version_hash FROM p2panda.schemas WHERE schema_id = %s", (slothmail,)
    ).fetchone()[0]
    expected = {
        ("slothmail", 5, None): (0, "present"),
        (slothmail, 5, None): (0, "present"),
        ("slothmail", 5, hash_of_5): (0, "present"),
        ("slothmail", 5, "00" * 34): (3, "conflicting"),
        ("slothmail", 4, None): (3, "conflicting"),  # reverted
        ("slothmail", 3, None): (3, "too-new"),
        ("slothmail", 6, None): (3, "needs-update"),
        ("nomail", 1, None): (3, "not-present"),
    }
    for (schema, version, known_hash), (code, name) in expected.items():
        argv = ["check", schema, version] + (["--hash", known_hash] if known_hash else [])
        got_code, got = outcome(panda(*argv))
        assert (got_code, got["outcome"]) == (code, name), (argv, got)
    assert outcome(panda("check", "slothmail", 5))[1]["held"] == 5

    # Restored from the dump, the database knows it holds version 4 (live again there:
    # the revert is not in it), whatever it held before.
    restore(conn, database_url, backup)
    assert outcome(panda("check", "slothmail", 5))[1]["outcome"] == "needs-update"
    assert outcome(panda("check", "slothmail", 4))[1]["outcome"] == "present"
    # Ensuring version 5 cannot succeed before the revert's entry is back in the store...
    code, result = outcome(panda("ensure", "slothmail", 5))
    assert (code, result["outcome"], result["held"]) == (3, "needs-update", 4)
    assert "version 5 is not in the store" in result["message"]
    # ...and does once peers sent it again.
    ok(panda("ingest", story.file))
    code, result = outcome(panda("ensure", "slothmail", 5))
    assert (code, result["outcome"], result["held"], result["changed"]) == (0, "present", 5, True)
    # It never downgrades, and a present version is left alone.
    materialized_at = "SELECT materialized_at FROM p2panda.schemas WHERE schema_id = %s"
    before = conn.execute(materialized_at, (slothmail,)).fetchone()
    code, result = outcome(panda("ensure", "slothmail", 3))
    assert (code, result["outcome"], result["changed"]) == (3, "too-new", False)
    code, result = outcome(panda("ensure", "slothmail", 5))
    assert (code, result["outcome"], result["changed"]) == (0, "present", False)
    assert conn.execute(materialized_at, (slothmail,)).fetchone() == before


def test_a_shared_name_is_its_holders_and_registration_renames_the_other(
    panda: Panda, conn: psycopg.Connection, tmp_path: Path
) -> None:
    """Registered before their logs arrived, two schemas turn out to share their own
    name: the first registered keeps the view (rule T-VIEW), a check by the name answers
    for it (not `conflicting`), and registering the other with --name names it too. A
    third of that name, registered once its log is in the store, gets a qualified name
    at once."""
    corpus = CorpusBuilder()
    first = corpus.author(1).schema(1, "note")
    second = corpus.author(2).schema(1, "note")
    third = corpus.author(3).schema(1, "tag")
    fourth = corpus.author(4).schema(1, "note")
    for log_id, schema in enumerate((first, second, third, fourth), start=1):
        schema.migrate(create_field("text", "text"))
        instances(corpus.author(9), log_id).create(schema.ref(), text="hello")
    file = tmp_path / "notes.jsonl"
    file.write_text("".join(entry_line(e, p) + "\n" for e, p in corpus.pairs))
    for schema in (first, second):
        ok(panda("register", *schema.schema_id.rsplit("-", 1)))
    ok(panda("ingest", file))
    ok(panda("materialize"))

    views = "SELECT viewname FROM pg_views WHERE schemaname = 'p2panda_api' ORDER BY 1"
    assert conn.execute(views).fetchall() == [("note",)]
    conflicts = dict(conn.execute("SELECT schema_id, view_conflict FROM p2panda.schemas"))
    assert conflicts[first.schema_id] is None
    assert f"held by schema {first.schema_id}" in conflicts[second.schema_id]
    assert f"no view for {second.schema_id}: name 'note' is held by" in ok(panda("status"))
    code, result = outcome(panda("check", "note", 2))  # the name's holder, as for the view
    assert (code, result["outcome"], result["schema_id"]) == (0, "present", first.schema_id)

    renamed = ok(panda("register", *second.schema_id.rsplit("-", 1), "--name", "second note"))
    assert renamed.splitlines()[-1] == "renamed note -> second note"
    assert conn.execute(views).fetchall() == [("note",), ("second note",)]
    assert outcome(panda("check", "note", 2))[1]["schema_id"] == first.schema_id
    assert outcome(panda("check", "second note", 2))[1]["outcome"] == "present"
    rows = conn.execute('SELECT text FROM p2panda_api."second note"').fetchall()
    assert rows == [("hello",)]

    qualified = ok(panda("register", *fourth.schema_id.rsplit("-", 1)))
    assert f"the name note is held by {first.schema_id}" in qualified

    # Ensuring a schema nobody registered, by its id, registers and builds it.
    code, result = outcome(panda("ensure", third.schema_id, 2))
    assert (code, result["outcome"], result["changed"]) == (0, "present", True)
    assert ("tag",) in conn.execute(views).fetchall()
