"""`panda schema NAME migrate --check FILE [--entries FILE...]`: the class of a migration
(safe or lossy) and the values it would make fall back, told before publishing, and
nothing published."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from p2panda_assets.authoring.state import STATE_FILE
from p2panda_assets.engine.compatibility import Kind, history_compatibility
from tests.authoring.helpers import RESOURCES, Run, corpus_of, ok

MULTI_LINE = "Hello!\n...friend"


def check(panda: Run, name: str, definition: Path, *entries: Path) -> list[str]:
    """The report lines of `migrate --check`."""
    argv = ["schema", name, "migrate", "--check", definition]
    if entries:
        argv += ["--entries", *entries]
    return ok(panda(*argv)).splitlines()


def migrate(panda: Run, name: str, definition: Path, out: Path) -> str:
    return ok(panda("schema", name, "migrate", definition, "--out", out))


def create(panda: Run, schema: str, out: Path, *fields: str) -> str:
    argv = ["publish", "create", "--schema", schema, "--out", out]
    for item in fields:
        argv += ["--field", item]
    return ok(panda(*argv))


@pytest.fixture
def story(keyed: Run, tmp_path: Path) -> dict:
    """The slothmail story (resources/) up to version 3, each migration checked first; the
    reports are kept under their file's name."""
    out = tmp_path / "story.jsonl"
    panda = keyed
    ids: dict = {"out": out, "reports": {}}
    for name in ("profile", "attachment"):
        ok(panda("schema", name, "init", "--file", RESOURCES / f"{name}-001.yaml", "--out", out))
    ids["slothmail"] = ok(panda("schema", "slothmail", "init", "--out", out)).split()[0]
    for step in ("001", "002"):
        path = RESOURCES / f"slothmail-{step}.yaml"
        ids["reports"][step] = check(panda, "slothmail", path, out)
        migrate(panda, "slothmail", path, out)
        if step == "001":
            ids["sloth"] = create(panda, "profile", out, "name=Sloth")
            ids["m1"] = create(panda, "slothmail", out, f"subject={MULTI_LINE}")
    ids["att"] = create(panda, "attachment", out, "filename=a.txt", "data=00")
    ids["m2"] = create(panda, "slothmail", out, "subject=Fine", f'attachments=["{ids["att"]}"]')
    ids["m3"] = create(panda, "slothmail", out, "subject=#tagged")
    return ids


def test_each_slothmail_migration_is_classed_before_it_is_published(
    keyed: Run, story: dict
) -> None:
    out = story["out"]
    assert story["reports"]["001"] == [
        "safe",
        "subject: safe: adds a field",
        "body: safe: adds a field",
        "recipient: safe: adds a field",
        "created: safe: adds a field",
    ]
    assert story["reports"]["002"][:2] == ["safe", "attachments: safe: adds a field"]
    report = check(keyed, "slothmail", RESOURCES / "slothmail-003.yaml")
    assert report == [
        "lossy",
        "attachments: lossy: removes a field (a revert shows it again)",
        r"subject: lossy: tightens validation (adds `^[^#\r\n].*$`)",
    ]
    migrate(keyed, "slothmail", RESOURCES / "slothmail-003.yaml", out)
    history = corpus_of(out).histories[story["slothmail"]]
    classes = history_compatibility(history)
    assert {seq: c.kind for seq, c in classes.items()} == {2: Kind.SAFE, 3: Kind.SAFE, 4: "lossy"}


def test_check_publishes_nothing(keyed: Run, story: dict, p2panda_home: Path) -> None:
    out = story["out"]
    state = p2panda_home / STATE_FILE
    before = (out.read_bytes(), state.read_bytes())
    definition = RESOURCES / "slothmail-003.yaml"
    code, stdout, err = keyed("schema", "slothmail", "migrate", "--check", definition)
    assert code == 0 and stdout.splitlines()[0] == "lossy"
    assert '"entry"' not in stdout  # no entry lines, unlike `migrate` without --out
    assert "Checked slothmail version 4; nothing was published" in err
    code, _, err = keyed(
        "schema", "slothmail", "migrate", "--check", definition, "--entries", out, "--out", out
    )
    assert code == 0 and f"--check leaves {out} as it is" in err
    assert (out.read_bytes(), state.read_bytes()) == before
    # The version the check named is the one the migration then gets.
    assert migrate(keyed, "slothmail", definition, out).endswith("version 4")


def test_predicted_fallbacks_are_the_rows_that_fall_back_after_publishing(
    keyed: Run, story: dict
) -> None:
    """m1's multi-line subject and m3's `#tagged` fail the new validation; m2 passes."""
    out, definition = story["out"], RESOURCES / "slothmail-003.yaml"
    report = check(keyed, "slothmail", definition, out)
    assert report[3:] == [
        "fallbacks subject: 2 of 3 rows fall back to the default (the table would count 2)",
        "hidden attachments: 1 of 3 rows hold a value it hides",
    ]
    migrate(keyed, "slothmail", definition, out)
    table = corpus_of(out).tables[story["slothmail"]]
    subjects = {row.instance_id.hex(): row.values["subject"] for row in table.rows}
    assert subjects == {story["m1"]: "<Subject>", story["m2"]: "Fine", story["m3"]: "<Subject>"}
    assert table.fallbacks["subject"] == 2


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def change(path: Path, name: str, **keys: object) -> Path:
    """A definition file with one field change."""
    path.write_text(yaml.safe_dump({"fields": {name: keys}}))
    return path


@pytest.fixture
def counter(keyed: Run, tmp_path: Path) -> tuple[Path, str]:
    """A schema `counter` with a text field `n` holding "1", "x", "-1", "2.5" and null."""
    out = tmp_path / "counter.jsonl"
    fields = change(tmp_path / "c1.yaml", "n", type="text")
    schema_id = ok(keyed("schema", "counter", "init", "--file", fields, "--out", out)).split()[0]
    for value in ("1", "x", "-1", "2.5", ""):
        create(keyed, "counter", out, f"n={value}")
    return out, schema_id


def test_lossy_narrowing_predicts_the_fallbacks_the_table_then_counts(
    keyed: Run, counter: tuple[Path, str], tmp_path: Path
) -> None:
    out, schema_id = counter
    narrow = change(tmp_path / "c2.yaml", "n", action="update", type="integer", default=-1)
    assert check(keyed, "counter", narrow, out) == [
        "lossy",
        "n: lossy: narrows text -> integer",
        "fallbacks n: 2 of 5 rows fall back to the default (the table would count 2)",
    ]
    migrate(keyed, "counter", narrow, out)
    table = corpus_of(out).tables[schema_id]
    values = sorted((row.values["n"] for row in table.rows), key=repr)
    assert values == [-1, -1, -1, 1, None]  # "x" and "2.5" fell back; "-1" is -1 itself
    assert table.fallbacks == {"n": 2}


def test_safe_widening_predicts_no_fallback(
    keyed: Run, counter: tuple[Path, str], tmp_path: Path
) -> None:
    out, _ = counter
    widen = change(tmp_path / "c2.yaml", "n", action="update", type="text[]", default=[])
    assert check(keyed, "counter", widen, out) == [
        "safe",
        "n: safe: widens text -> text[] (lossless)",
        "fallbacks n: 0 of 5 rows fall back to the default (the table would count 0)",
    ]


def test_check_refuses_a_migration_the_engine_would_reject(
    keyed: Run, counter: tuple[Path, str], tmp_path: Path
) -> None:
    out, _ = counter
    before = out.read_bytes()
    missing = change(tmp_path / "c2.yaml", "m", action="update", type="text", default="a")
    code, stdout, err = keyed("schema", "counter", "migrate", "--check", missing)
    assert (code, stdout) == (1, "") and err.startswith("error: field-missing:")
    assert out.read_bytes() == before


def test_entries_without_check_are_refused(
    keyed: Run, counter: tuple[Path, str], tmp_path: Path
) -> None:
    out, _ = counter
    add = change(tmp_path / "c2.yaml", "m", type="text")
    code, _, err = keyed("schema", "counter", "migrate", add, "--entries", out)
    assert code == 1 and err.startswith("error: bad-input: --entries goes with --check")


def test_entries_must_hold_the_whole_schema_log(
    keyed: Run, counter: tuple[Path, str], tmp_path: Path
) -> None:
    out, _ = counter
    add = change(tmp_path / "c2.yaml", "m", type="text")
    empty = write(tmp_path / "empty.jsonl", "")
    code, _, err = keyed("schema", "counter", "migrate", "--check", add, "--entries", empty)
    assert code == 1 and err.startswith("error: unknown-schema:")
    cut = write(tmp_path / "cut.jsonl", out.read_text().splitlines()[0] + "\n")  # version 1
    code, _, err = keyed("schema", "counter", "migrate", "--check", add, "--entries", cut)
    assert code == 1
    assert err.startswith("error: bad-input:") and "up to version 1, the local log is at 2" in err
