"""`panda ingest`, `panda register` and `panda status`, end to end in-process."""

from __future__ import annotations

from pathlib import Path

import pytest

from p2panda_assets.cli.main import main
from p2panda_assets.cli.store_cmd import CHECKED_NOTE
from p2panda_assets.jsonlines import UTF8_BOM, entry_line

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
    header, line, unprocessed = out.splitlines()
    assert header.split() == [
        "schema", "id", "name", "version", "status", "rows",
        "applied", "superseded", "pending", "rejected", "safe", "lossy", "fallbacks", "view",
    ]  # fmt: skip
    assert line.split() == [
        f"{author}-12", "slothmail", "-", "registered", "-", "0", "0", "0", "0", "0", "0", "0", "-",
    ]  # fmt: skip
    assert unprocessed == "unprocessed: 5 entries not yet accounted for (pending)"
