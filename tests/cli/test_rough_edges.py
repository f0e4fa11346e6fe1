"""Issue 49, the command line's rough edges, each through the command a user types, on a
real PostgreSQL: a closed stdout ends quietly; a registration of a log the store has not
seen says so, and `materialize` shows no version for it; a mistyped name is
`unknown-schema` with the closest names; `unregister` names the schemas that relate to
it and says what --force does; after it every stored entry is still accounted for; and
`panda demo` prints values as `panda preview` does, says the truth on a rerun, and does
not import `cli.main`. (`payload-conflict`: tests/store/test_ingest_conflicts.py.)"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import psycopg
import pytest

from p2panda_assets.cli import demo_cmd
from p2panda_assets.cli.demo_cmd import (
    BUILT_LEGEND,
    Author,
    Snapshot,
    built_legend,
    opening,
    preview_values,
    revert_heading,
)
from p2panda_assets.cli.main import main
from p2panda_assets.cli.materialize_cmd import result_line
from p2panda_assets.engine.corpus import reduce_corpus
from p2panda_assets.engine.lens import FieldSpec
from p2panda_assets.engine.preview import row_json
from p2panda_assets.jsonlines import entry_line, read_entry_lines
from p2panda_assets.protocol.fieldtypes import FieldType
from p2panda_assets.store.ingest import ingest
from p2panda_assets.store.registry import registered_schemas, status_rows, store_totals
from p2panda_assets.testing.builder import CorpusBuilder, create_field, instances

PANDA = Path(sys.executable).parent / "panda"
UNSEEN = "ab" * 32  # an author no corpus here has


def run(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str, str]:
    code = main([str(arg) for arg in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def dagster_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Partitions of this test's own (register and unregister add and remove them)."""
    home = tmp_path / "dagster"
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    return home


def mail_corpus() -> tuple[CorpusBuilder, dict[str, str]]:
    """Schemas `slothmail` (log 3) and `profile` (log 1) of one author, with one
    instance of slothmail whose log has a create, an update and a delete; the schema ids."""
    corpus = CorpusBuilder()
    author = corpus.author(1)
    profile = author.schema(1, "profile")
    profile.migrate(create_field("name", "text"))
    mail = author.schema(3, "slothmail")
    mail.migrate(create_field("subject", "text"))
    writer = instances(corpus.author(2), 1)
    sent = writer.create(mail.ref(2), subject="Hi")
    writer.update(mail.ref(2), sent, subject="Hi again")
    writer.delete(sent)
    return corpus, {"profile": profile.schema_id, "slothmail": mail.schema_id}


def register(capsys: pytest.CaptureFixture[str], schema_id: str, name: str) -> str:
    """`panda register`; its stderr."""
    author, log_id = schema_id.rsplit("-", 1)
    code, _, err = run(capsys, "register", author, log_id, "--name", name)
    assert code == 0, err
    return err


# --- a closed stdout ---------------------------------------------------------------


def piped(command: str, reader: str, cwd: Path) -> tuple[int, str]:
    """`panda COMMAND | READER` through a real shell pipe: panda's exit status, stderr."""
    shell = subprocess.run(
        ["bash", "-c", f'"$0" {command} 2>panda.err | {reader}; echo "${{PIPESTATUS[0]}}"', PANDA],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=os.environ,
        timeout=120,
    )
    return int(shell.stdout.splitlines()[-1]), (cwd / "panda.err").read_text()


@pytest.mark.postgres
def test_a_reader_that_stops_early_ends_panda_quietly(
    capsys: pytest.CaptureFixture[str], conn: psycopg.Connection, tmp_path: Path
) -> None:
    """(It ended with `error: internal: BrokenPipeError` and exit 1.) `head -0` closes
    the pipe before panda writes; `head -1` reads one line and goes."""
    corpus, ids = mail_corpus()
    ingest(conn, corpus.pairs)
    for name, schema_id in ids.items():
        register(capsys, schema_id, name)
    story = tmp_path / "story.jsonl"
    story.write_text("".join(entry_line(*pair) + "\n" for pair in corpus.pairs))
    for command, reader in (
        ("status", "head -1"),
        ("status", "head -0"),
        ("preview story.jsonl --schema profile", "head -0"),
        ("--debug status", "head -0"),
    ):
        code, err = piped(command, reader, tmp_path)
        assert code in (0, 141) and err == "", (command, reader, code, err)
    assert piped("status", "cat >/dev/null", tmp_path) == (0, "")


# --- a log the store has not seen ----------------------------------------------------


@pytest.mark.postgres
def test_registering_a_log_the_store_has_not_seen_says_so_and_shows_no_version(
    capsys: pytest.CaptureFixture[str], conn: psycopg.Connection
) -> None:
    corpus, ids = mail_corpus()
    ingest(conn, corpus.pairs)
    assert register(capsys, ids["slothmail"], "slothmail") == ""
    unseen = f"{UNSEEN}-9"
    assert register(capsys, unseen, "nothing") == (
        f"note: the store holds no entry of log {unseen} yet: it is registered, and gets a"
        " table once its schema log is ingested (check the author and log id if it should"
        " be there)\n"
    )
    row = next(row for row in registered_schemas(conn) if row.schema_id == unseen)
    assert result_line(row) == f"{unseen}  nothing  no version yet  registered"
    conn.execute(
        "UPDATE p2panda.schemas SET status = 'pending', status_message = %s WHERE schema_id = %s",
        (f"awaiting-schema: schema {unseen} is not known", unseen),
    )
    row = next(row for row in registered_schemas(conn) if row.schema_id == unseen)
    line = result_line(row)
    waiting = f"pending (awaiting-schema: schema {unseen} is not known)"
    assert line == f"{unseen}  nothing  no version yet  {waiting}"
    assert "None" not in line and "p2panda_data" not in line


# --- a mistyped name -----------------------------------------------------------------

TYPO = "no schema named 'slothmial' is registered; the closest: slothmail"


@pytest.mark.postgres
def test_a_mistyped_name_is_an_unknown_schema_with_the_closest_names(
    capsys: pytest.CaptureFixture[str], conn: psycopg.Connection, dagster_home: Path
) -> None:
    _, ids = mail_corpus()
    register(capsys, ids["slothmail"], "slothmail")
    register(capsys, ids["profile"], "profile")
    code, out, err = run(capsys, "check", "slothmial", "5")
    assert code == 3
    answer = json.loads(out)  # said once, in the answer (issue 56): not again on stderr
    assert (answer["outcome"], answer["schema_id"], answer["message"]) == (
        "not-present",
        None,
        TYPO,
    )
    assert err == ""
    for command in ("materialize", "unregister"):
        assert run(capsys, command, "slothmial") == (1, "", f"error: unknown-schema: {TYPO}\n")
    code, _, err = run(capsys, "materialize", "zzz")
    assert (code, err) == (1, "error: unknown-schema: no schema named 'zzz' is registered\n")
    # A schema registered but not built is `not-present` too, without the warning.
    code, _, err = run(capsys, "check", "slothmail", "2")
    assert (code, err) == (3, "")
    assert {row.schema_id for row in registered_schemas(conn)} == set(ids.values())


# --- unregister: dependents, --force, and the accounts after it ---------------------


@pytest.mark.postgres
def test_unregister_names_the_schemas_that_relate_and_says_what_force_does(
    capsys: pytest.CaptureFixture[str], conn: psycopg.Connection, dagster_home: Path
) -> None:
    _, ids = mail_corpus()
    profile, mail = ids["profile"], ids["slothmail"]
    register(capsys, profile, "profile")
    register(capsys, mail, "slothmail")
    conn.execute(  # as a build of slothmail, which relates to profile, records it
        "UPDATE p2panda.schemas SET upstream = ARRAY[%s] WHERE schema_id = %s", (profile, mail)
    )
    code, out, err = run(capsys, "unregister", "profile")
    assert (code, out) == (1, "")
    assert err == (
        f"error: bad-input: slothmail ({mail}) relates to profile ({profile}): unregister"
        " slothmail first, or run again with --force to unregister profile anyway;"
        " slothmail's table then stays as it is, and is not built again until profile is"
        " registered again\n"
    )
    code, out, err = run(capsys, "unregister", "profile", "--force")
    assert (code, err) == (0, "")
    assert out.splitlines()[-1] == (
        f"  slothmail ({mail}) relates to it: its table stays as it is, and is not built"
        " again until this schema is registered again"
    )
    _, help_text, _ = run_help(capsys, "unregister")
    assert "--force" in help_text and "not built again until it is registered again" in help_text


def run_help(capsys: pytest.CaptureFixture[str], command: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_:
        main([command, "--help"])
    out, err = capsys.readouterr()
    return int(exit_.value.code or 0), " ".join(out.split()), err


@pytest.mark.postgres
def test_after_unregister_every_stored_entry_is_still_accounted_for(
    capsys: pytest.CaptureFixture[str], conn: psycopg.Connection, dagster_home: Path
) -> None:
    """(`panda status` said `unprocessed: 1 entries not yet accounted for (pending)`: the
    accounts of the schema's builds were deleted, and nothing accounted for those
    entries until the next index step.) They wait for the schema now, as the index step
    says of a schema that is not registered; a rejection stays one."""
    corpus, ids = mail_corpus()
    mail = ids["slothmail"]
    ingest(conn, corpus.pairs)
    register(capsys, mail, "slothmail")
    mail_log = [
        h
        for (h,) in conn.execute(
            "SELECT hash FROM p2panda.entries e WHERE encode(author, 'hex') || '-' || log_id = %s"
            " ORDER BY seq_num",
            (mail,),
        )
    ]
    instance_log = [
        h
        for (h,) in conn.execute(
            "SELECT hash FROM p2panda.entries WHERE author = %s ORDER BY seq_num",
            (corpus.author(2).key_pair.public_key,),
        )
    ]
    schema_log = [
        h
        for (h,) in conn.execute(
            "SELECT hash FROM p2panda.entries WHERE NOT hash = ANY(%s) AND NOT hash = ANY(%s)",
            (mail_log, instance_log),
        )
    ]
    accounts = [  # as the index step and a build of slothmail write them
        *((h, None, "applied", None, "schema") for h in schema_log),
        *((h, mail, "applied", None, "schema") for h in mail_log),
        (instance_log[0], mail, "superseded", None, "instance"),
        (instance_log[1], mail, "rejected", "invalid-value", "instance"),
        (instance_log[2], mail, "applied", None, "instance"),
    ]
    with conn.cursor() as cursor:
        cursor.executemany(
            "INSERT INTO p2panda.accounts (hash, schema_id, state, reason, origin)"
            " VALUES (%s, %s, %s, %s, %s)",
            accounts,
        )
    assert store_totals(conn).unprocessed == 0

    code, out, err = run(capsys, "unregister", "slothmail")
    assert (code, err) == (0, "")
    assert "  2 entries of its logs wait for it to be registered again (pending)" in out
    totals = store_totals(conn)
    assert totals.unprocessed == 0
    assert (totals.unregistered_applied, totals.unregistered_pending) == (4, 2)
    assert totals.unregistered_rejected == 1
    assert status_rows(conn) == []
    pending = conn.execute(
        "SELECT DISTINCT reason, message, origin FROM p2panda.accounts WHERE state = 'pending'"
    ).fetchall()
    assert pending == [("awaiting-schema", f"schema {mail} is not registered", "pending")]
    code, out, _ = run(capsys, "status")
    assert out.splitlines()[-2:] == [
        "unprocessed: 0 entries not yet accounted for (pending)",
        "not registered: applied 4, superseded 0, pending 2, rejected 1",
    ]


# --- panda demo ------------------------------------------------------------------------


def spec(name: str, kind: str) -> FieldSpec:
    return FieldSpec(name, FieldType.parse(kind), None, None, None, False, 2)


@pytest.mark.postgres
def test_the_demo_prints_values_as_preview_does(conn: psycopg.Connection) -> None:
    """(`_seq` was "1", a timestamp `2020-05-22 11:58:50+00:00`.) Values as PostgreSQL
    returns them, in a table's column types, shown in preview's form."""
    record = conn.execute(
        "SELECT '00aa'::text AS _instance_id, 3::bigint AS _version, 1::numeric(20, 0) AS _seq,"
        " '2020-05-22 11:58:50+00'::timestamptz AS created, '\\x0102'::bytea AS data,"
        " ARRAY['2020-05-22 11:58:50.5+02'::timestamptz] AS times,"
        " 'NaN'::double precision AS ratio, 'Hi'::text AS subject"
    ).fetchone()
    assert record is not None
    names = ("_instance_id", "_version", "_seq", "created", "data", "times", "ratio", "subject")
    lens = {
        name: spec(name, kind)
        for name, kind in [("created", "timestamp"), ("data", "blob"), ("ratio", "float")]
    }
    shown = preview_values(dict(zip(names, record, strict=True)), lens)
    assert shown == {
        "_instance_id": "00aa",
        "_version": 3,
        "_seq": 1,
        "created": "2020-05-22T11:58:50Z",
        "data": "0102",
        "times": ["2020-05-22T09:58:50.500000Z"],  # outside the lens: by its type
        "ratio": "NaN",
        "subject": "Hi",
    }
    assert isinstance(record[2], Decimal) and isinstance(record[3], datetime)
    assert record[3] == datetime(2020, 5, 22, 11, 58, 50, tzinfo=UTC)


def test_the_demo_says_the_truth_on_a_first_run_and_on_a_rerun(tmp_path: Path) -> None:
    """(A second run announced "publish four versions" over a table at version 5.)"""
    story = tmp_path / "story.jsonl"
    author = Author(tmp_path / "author", story)
    demo_cmd.write_story_until_revert(author)
    slothmail = author.schema_id("slothmail")
    corpus = reduce_corpus(item for item in read_entry_lines([story]) if isinstance(item, tuple))
    table = corpus.tables[slothmail]
    rows = {row.instance_id.hex(): row_json(table, row) for row in table.rows}
    first = Snapshot(slothmail, "t", 4, [], rows, corpus)
    again = Snapshot(slothmail, "t", 5, [], rows, corpus)
    assert not first.ahead and again.ahead
    assert opening(first) == (
        "The slothmail authors publish four versions; one mail is deleted at version 4"
    )
    assert "four versions again" in opening(again)
    assert opening(again).endswith("so the table is at version 5 already")
    assert revert_heading(first).startswith("The authors revert slothmail to version 3 (")
    assert revert_heading(again).endswith("again: this store has that revert")


def test_the_demo_does_not_import_the_entry_point() -> None:
    """`cli.main` imports every command, `demo` among them: the demo parses the commands
    it runs with a parser of its own."""
    tree = ast.parse(Path(demo_cmd.__file__).read_text())
    imported = {
        node.module if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    assert "p2panda_assets.cli.main" not in imported
    assert not any(
        isinstance(node, ast.ImportFrom)
        and node.module == "p2panda_assets.cli"
        and any(alias.name == "main" for alias in node.names)
        for node in ast.walk(tree)
    )
    args = demo_cmd.command_parser().parse_args(["ingest", "story.jsonl"])
    assert args.files == ["story.jsonl"]


# --- the demo explains what it prints -------------------------------------------------


def test_the_demo_says_what_built_means_under_materialize_once() -> None:
    """Issue 56: `built: driver|spark` was printed unexplained. One line under
    `panda materialize`'s output says it, where that output has it."""
    lines = "a-1  profile  version 2  1 rows  p2panda_data.s_a_1  built: spark"
    assert built_legend(lines) == f"\n{BUILT_LEGEND}"
    assert "spark = Spark jobs" in BUILT_LEGEND and "driver = " in BUILT_LEGEND
    assert built_legend("up to date: nothing new since these tables were built") == ""
