"""Issue 56, item 2: rejected entries are named. `panda ingest` says what it checked and
what it left to the build; after a build, `panda status --rejected` names each rejected
entry (hash, author, log, seq, reason, message, `file:line`), those rejected before their
log had a schema too, and the accounting check's metadata holds the same table. The
forged entries are written by the test: one hex digit of a signature flipped."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import psycopg
import pytest

from p2panda_assets.cli.main import main
from p2panda_assets.cli.rejections import rejection_cells, schema_label
from p2panda_assets.cli.store_cmd import CHECKED_NOTE, UnreadableLines, ingest_summary
from p2panda_assets.defs.checks.accounting import rejected_entries
from p2panda_assets.errors import P2pandaError, Reason
from p2panda_assets.jsonlines import BadLine, entry_line
from p2panda_assets.protocol.entry import decode_entry
from p2panda_assets.store.ingest import IngestCounts
from p2panda_assets.store.rejections import Rejection
from p2panda_assets.testing.builder import CorpusBuilder, create_field, instances

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SIGNATURE_HEX = 128  # the last 64 bytes of an entry


@pytest.fixture
def dagster_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "dagster"
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    return home


def run(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str, str]:
    code = main([str(arg) for arg in argv])
    out, err = capsys.readouterr()
    return code, out, err


def forged(entry: bytes) -> bytes:
    """The entry with one hex digit of its signature flipped: it still decodes."""
    text = entry.hex()
    at = len(text) - SIGNATURE_HEX + 5
    digit = "0" if text[at] != "0" else "1"
    return bytes.fromhex(text[:at] + digit + text[at + 1 :])


def story(tmp_path: Path) -> tuple[Path, str, bytes, bytes]:
    """A file of a schema log, an instance log whose second entry is forged, a line that
    is not JSON (line 5) and a forged first entry of another log (line 7); the file, the
    schema id, and the hashes of the two forged entries."""
    corpus = CorpusBuilder()
    mail = corpus.author(1).schema(3, "slothmail")
    mail.migrate(create_field("subject", "text"))
    writer = instances(corpus.author(2), 1)
    sent = writer.create(mail.ref(2), subject="Hi")
    writer.update(mail.ref(2), sent, subject="Hi again")
    instances(corpus.author(3), 1).create(mail.ref(2), subject="a stranger's")
    meta, migration, create, (update, update_payload), (lone, lone_payload) = corpus.pairs
    lines = [
        entry_line(*meta),
        entry_line(*migration),
        entry_line(*create),
        entry_line(forged(update), update_payload),
        "not json",
        "",
        entry_line(forged(lone), lone_payload),
    ]
    path = tmp_path / "story.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    forged_hashes = (decode_entry(forged(update)).hash, decode_entry(forged(lone)).hash)
    return path, mail.schema_id, *forged_hashes


@pytest.mark.postgres
def test_ingest_says_signatures_are_checked_by_the_build(
    capsys: pytest.CaptureFixture[str], database_url: str, tmp_path: Path
) -> None:
    """(It said `accepted 2, duplicate 0, rejected 1` of a file with a forged entry, and
    nothing else: the forged one counted among the accepted.)"""
    path, _, _, _ = story(tmp_path)
    code, out, err = run(capsys, "ingest", path)
    assert code == 0
    assert out.splitlines() == [
        "accepted 5, duplicate 0, rejected 1",
        f"rejected here: unreadable lines 1 (first: {path}:5: not a JSON object)",
        CHECKED_NOTE,
    ]
    assert "signatures and log chains are checked when the pipeline builds" in CHECKED_NOTE
    assert err == f"warning: bad-input: {path}:5: not a JSON object\n"


@pytest.mark.postgres
def test_before_a_build_the_listing_says_entries_wait_for_it(
    capsys: pytest.CaptureFixture[str], database_url: str, tmp_path: Path
) -> None:
    path, _, _, _ = story(tmp_path)
    run(capsys, "ingest", path)
    code, out, err = run(capsys, "status", "--rejected")
    assert (code, out) == (0, "no rejected entries in the store\n")
    assert err.startswith("note: 5 entries are not verified yet")


@pytest.mark.postgres
@pytest.mark.spark
def test_a_forged_entry_is_named_after_a_build_with_its_hash_reason_and_line(
    spark: SparkSession,
    conn: psycopg.Connection,
    database_url: str,
    p2panda_home: Path,
    dagster_home: Path,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    path, schema_id, update, lone = story(tmp_path)
    assert run(capsys, "ingest", path)[0] == 0
    author, log_id = schema_id.rsplit("-", 1)
    assert run(capsys, "register", author, log_id, "--name", "slothmail")[0] == 0
    code, _, err = run(capsys, "materialize")
    assert (code, err) == (0, "")

    code, out, err = run(capsys, "status", "--rejected", "--wide")
    assert (code, err) == (0, "")
    summary, header, *rows = out.splitlines()
    assert summary == "rejected entries in the store: 2"
    assert header.split()[:7] == ["schema", "hash", "author", "log", "seq", "reason", "from"]
    # The lone entry's log has no other entry: no schema could be named for it.
    no_schema, in_mail = (row.split() for row in rows)
    assert no_schema[:2] == ["no", "schema"]
    assert no_schema[2:7] == [lone.hex(), no_schema[3], "1", "1", "bad-signature"]
    assert no_schema[7] == f"{path}:7"
    assert in_mail[:6] == [schema_id, update.hex(), in_mail[2], "1", "2", "bad-signature"]
    assert in_mail[6] == f"{path}:4"
    assert len(in_mail[2]) == 64  # --wide: the author whole

    code, out, _ = run(capsys, "status", "--rejected", "slothmail")
    summary, _, row = out.splitlines()
    assert summary == f"rejected entries in schema {schema_id}: 1"
    assert row.split()[:7] == [
        "slothmail",
        update.hex(),
        row.split()[2],
        "1",
        "2",
        "bad-signature",
        f"{path}:4",
    ]
    assert "…" in row.split()[2]  # shortened without --wide

    metadata = rejected_entries(conn, schema_id)
    assert metadata["rejected_entries_shown"] == "1 of 1"
    (record,) = metadata["rejected_entries"].value.records
    assert record.data["hash"] == update.hex()
    assert (record.data["reason"], record.data["from"]) == ("bad-signature", f"{path}:4")
    assert json.dumps(record.data)  # plain values, as the UI shows them


def test_ingest_names_each_kind_of_rejection_it_finds_itself() -> None:
    unreadable = UnreadableLines()
    unreadable.add(BadLine("a.jsonl", 7, P2pandaError(Reason.BAD_INPUT, "not a JSON object")))
    counts = IngestCounts(accepted=2, duplicate=0, rejected=4)
    assert ingest_summary(counts, unreadable, conflicts=1) == [
        "accepted 2, duplicate 0, rejected 4",
        "rejected here: unreadable lines 1 (first: a.jsonl:7: not a JSON object);"
        " stored with their reason 2 (not an entry, or not its payload);"
        " payload conflicts 1 (not stored)",
        CHECKED_NOTE,
    ]
    assert ingest_summary(IngestCounts(1, 0, 0), UnreadableLines(), 0) == [
        "accepted 1, duplicate 0, rejected 0",
        CHECKED_NOTE,
    ]


def test_the_listing_shortens_authors_and_schema_ids_never_the_hash() -> None:
    schema_id = "ab" * 32 + "-3"
    rejection = Rejection(
        b"\x00\x20" + b"\x11" * 32, b"\xcd" * 32, 1, 2, schema_id, "fork", "m", None, None
    )
    cells = rejection_cells(rejection, {schema_id: None}, wide=False)
    assert cells == ["abababab…-3", rejection.hash.hex(), "cdcdcdcd…", "1", "2", "fork", "-", "m"]
    assert rejection_cells(rejection, {schema_id: "mail"}, wide=False)[0] == "mail"
    wide = rejection_cells(rejection, {schema_id: "mail"}, wide=True)
    assert wide[:3] == [schema_id, rejection.hash.hex(), "cd" * 32]
    assert schema_label(None, {}, wide=True) == "no schema"
