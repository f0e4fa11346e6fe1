"""`panda ingest`, `panda register` and `panda status`, end to end in-process."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import psycopg
import pytest

from p2panda_assets.cli.main import main
from p2panda_assets.cli.store_cmd import CHECKED_NOTE
from p2panda_assets.defs.orchestration import shown_built_from
from p2panda_assets.defs.partitions import BUILT_FROM, CARRIED_FROM, FAMILY, SCHEMAS
from p2panda_assets.jsonlines import UTF8_BOM, entry_line
from p2panda_assets.store.registry import qualified_name
from p2panda_assets.testing.builder import CorpusBuilder
from tests.store.test_views import VIEWS, built

pytestmark = pytest.mark.postgres


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_ingest_prints_counts_and_warns_about_bad_lines(
    capsys, database_url: str, pairs, jsonl
) -> None:
    first = jsonl("a.jsonl", [entry_line(*pair) for pair in pairs[:3]])
    second = jsonl(
        "b.jsonl",
        [entry_line(*pairs[2]), "not json", entry_line(*pairs[3]), '{"entry": "zz"}'],
    )
    code, out, err = run(capsys, "ingest", str(first), str(second))
    assert code == 0
    assert out.splitlines() == [
        "accepted 4, duplicate 1, rejected 2",
        f"rejected here: unreadable lines 2 (first: {second}:2: not a JSON object)",
        CHECKED_NOTE,
    ]
    assert err.splitlines() == [
        f"warning: bad-input: {second}:2: not a JSON object",
        f"warning: bad-hex: {second}:4: entry or payload is not hex",
    ]
    code, out, _ = run(capsys, "ingest", str(first))
    assert (code, out.splitlines()[0]) == (0, "accepted 0, duplicate 3, rejected 0")


def test_json_python_cannot_read_is_a_bad_line_and_the_lines_beside_it_are_kept(
    capsys, database_url: str, tmp_path: Path, pairs
) -> None:
    """Nesting too deep for Python's parser, and an integer longer than it converts,
    are bad lines like any other (they raised out of the ingest, and the lines after
    them were never read); a byte order mark costs the first line nothing."""
    hostile = tmp_path / "hostile.jsonl"
    lines = [
        entry_line(*pairs[0]),
        "[" * 100_000,
        entry_line(*pairs[1]),
        '{"entry": "00", "n": ' + "9" * 5_000 + "}",
        entry_line(*pairs[2]),
    ]
    hostile.write_bytes(UTF8_BOM + "".join(line + "\n" for line in lines).encode())
    code, out, err = run(capsys, "ingest", str(hostile))
    assert code == 0
    assert out.splitlines()[0] == "accepted 3, duplicate 0, rejected 2"
    deep, long = err.splitlines()
    assert deep == f"warning: bad-input: {hostile}:2: JSON nested too deeply"
    assert long.startswith(f"warning: bad-input: {hostile}:4: JSON not read: Exceeds the limit")


def test_ingest_of_an_unreadable_file_stores_nothing(
    capsys, database_url: str, pairs, jsonl
) -> None:
    good = jsonl("good.jsonl", [entry_line(*pairs[0])])
    missing = good.parent / "missing.jsonl"
    code, out, err = run(capsys, "ingest", str(good), str(missing))
    assert code != 0 and out == ""
    assert err.startswith(f"error: unreadable-file: {missing}: ")
    code, out, _ = run(capsys, "ingest", str(good))
    assert out.splitlines()[0] == "accepted 1, duplicate 0, rejected 0"


def test_a_line_that_is_not_utf8_is_rejected_and_the_good_line_beside_it_kept(
    capsys, database_url: str, tmp_path: Path, pairs
) -> None:
    mixed = tmp_path / "mixed.jsonl"
    entry, payload = pairs[0]
    mixed.write_bytes(b"\xff\xfe\x00garbage\n" + entry_line(entry, payload).encode() + b"\n")
    code, out, err = run(capsys, "ingest", str(mixed))
    assert code == 0
    assert out.splitlines()[0] == "accepted 1, duplicate 0, rejected 1"
    assert err == f"warning: bad-input: {mixed}:1: the line is not UTF-8 text\n"


def test_register_prints_schema_id_and_table(capsys, database_url: str) -> None:
    author = "ab" * 32
    code, out, err = run(capsys, "register", author, "12", "--name", "slothmail")
    assert code == 0
    assert err.startswith(f"note: the store holds no entry of log {author}-12 yet")  # issue 49
    assert out == (f"schema_id: {author}-12\ntable_name: p2panda_data.s_{'ab' * 16}_12\n")


@pytest.mark.parametrize(
    ("argv", "reason"),
    [
        (("register", "xyz", "1"), "bad-hex"),
        (("register", "abcd", "1"), "bad-value"),
        (("register", "ab" * 32, "-1"), "bad-value"),
        (("register", "ab" * 32, "1", "--name", ""), "bad-name"),
        (("register", "ab" * 32, "18446744073709551616"), "bad-value"),  # 2^64
        (("register", "ab" * 32, "9" * 5_000), "bad-value"),  # int() refused it: internal
    ],
)
def test_register_reports_bad_arguments(capsys, database_url: str, argv, reason: str) -> None:
    code, out, err = run(capsys, *argv)
    assert code != 0 and out == ""
    assert err.startswith(f"error: {reason}: ")


def test_status_shows_registered_schemas_and_unprocessed_entries(
    capsys, database_url: str, pairs, jsonl
) -> None:
    author = "ab" * 32
    run(capsys, "register", author, "12", "--name", "slothmail")
    run(capsys, "ingest", str(jsonl("in.jsonl", [entry_line(*p) for p in pairs])))
    code, out, err = run(capsys, "status")
    assert (code, err) == (0, "")
    header, line, *legend, unprocessed = out.splitlines()
    assert header.split() == [
        "name", "id", "ver", "status", "rows", "entries", "migrations", "fell", "back", "view",
    ]  # fmt: skip
    assert line.split() == [
        "slothmail", "abababab…-12", "-", "registered", "-", "0/0/0/0", "0/0", "0", "-",
    ]  # fmt: skip
    assert legend[0].startswith("entries: applied/superseded/pending/rejected;")
    assert max(len(shown) for shown in out.splitlines()) <= 100
    assert unprocessed == "unprocessed: 5 entries not yet accounted for (pending)"

    code, out, _ = run(capsys, "status", "--wide")
    header, line, unprocessed = out.splitlines()
    assert header.split() == [
        "schema", "id", "name", "version", "status", "rows",
        "applied", "superseded", "pending", "rejected", "safe", "lossy", "fallbacks", "view",
    ]  # fmt: skip
    assert line.split() == [
        f"{author}-12", "slothmail", "-", "registered", "-", "0", "0", "0", "0", "0", "0", "0", "-",
    ]  # fmt: skip

    code, out, _ = run(capsys, "status", "--json")
    shown = json.loads(out)
    assert [(s["schema_id"], s["name"], s["status"]) for s in shown["schemas"]] == [
        (f"{author}-12", "slothmail", "registered")
    ]
    assert shown["totals"]["unprocessed"] == 5


# --- names: held by one schema, qualified, renamed (issue 56) ----------------------------


def test_register_refuses_a_name_another_schema_holds_and_keeps_its_view(
    capsys, conn: psycopg.Connection
) -> None:
    holder = built(conn, 0x31, "slothmail", None)
    newcomer = "cd" * 32
    code, out, err = run(capsys, "register", newcomer, "3", "--name", "slothmail")
    assert (code, out) == (1, "")
    assert err == (
        f"error: name-taken: the name slothmail is held by {holder}; pick another with --name\n"
    )
    code, out, _ = run(capsys, "status")
    assert newcomer not in out and "slothmail" in out
    assert conn.execute(VIEWS).fetchall() == [("slothmail",)]
    assert conn.execute("SELECT x FROM p2panda_api.slothmail").fetchall() == [("b",)]


def test_a_schema_whose_own_name_is_held_is_registered_under_a_qualified_name(
    capsys, database_url: str, jsonl
) -> None:
    holder = "ab" * 32
    run(capsys, "register", holder, "1", "--name", "note")
    corpus = CorpusBuilder()
    schema = corpus.author(0x32).schema(7, "note")
    run(capsys, "ingest", str(jsonl("note.jsonl", [entry_line(*p) for p in corpus.pairs])))
    author = schema.schema_id.split("-")[0]
    code, out, err = run(capsys, "register", author, "7")
    assert (code, err) == (0, "")
    assert out.splitlines()[2] == (
        f"registered as {qualified_name('note', schema.schema_id)}: the name note is held by"
        f" {holder}-1 (register again with --name to pick another)"
    )
    assert qualified_name("note", schema.schema_id) == f"note_{author[:8]}_7"


def test_a_rename_is_said_and_the_view_follows(capsys, conn: psycopg.Connection) -> None:
    schema_id = built(conn, 0x33, "letters", None)
    author, log_id = schema_id.split("-")
    code, out, _ = run(capsys, "register", author, log_id, "--name", "mail")
    assert code == 0 and out.splitlines()[2:] == ["renamed letters -> mail"]
    code, out, _ = run(capsys, "register", author, log_id, "--name", "mail")
    assert code == 0 and len(out.splitlines()) == 2  # the same name: nothing to say
    assert conn.execute(VIEWS).fetchall() == [("mail",)]
    assert conn.execute("SELECT x FROM p2panda_api.mail").fetchall() == [("b",)]


def test_a_renamed_schemas_partition_shows_its_last_build(
    capsys, database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The partition moves to the new key with the latest materialization of each asset
    under the old one (not Missing while the table is there), and `panda materialize`
    finds it built from the same index, so launches no run for it."""
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    author = "34" * 32
    schema_id = f"{author}-2"
    run(capsys, "register", author, "2", "--name", "letters")
    with dg.DagsterInstance.get() as instance:
        for asset in FAMILY:
            instance.report_runless_asset_event(
                dg.AssetMaterialization(
                    asset, partition=f"letters.{schema_id}", metadata={BUILT_FROM: "index-1"}
                )
            )
    assert run(capsys, "register", author, "2", "--name", "mail")[0] == 0
    with dg.DagsterInstance.get() as instance:
        partitions = instance.get_dynamic_partitions(SCHEMAS)
        assert f"mail.{schema_id}" in partitions and f"letters.{schema_id}" not in partitions
        for asset in FAMILY:
            [record] = instance.fetch_materializations(
                dg.AssetRecordsFilter(asset_key=asset, asset_partitions=[f"mail.{schema_id}"]),
                limit=5,
            ).records
            metadata = record.asset_materialization.metadata
            assert metadata[CARRIED_FROM].value == f"letters.{schema_id}"
            assert metadata["schema_name"].value == "mail"
        assert shown_built_from(instance, schema_id, f"mail.{schema_id}") == "index-1"
