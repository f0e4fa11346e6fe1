"""A damaged local authoring state (`$P2PANDA_HOME/authoring.json`) is `bad-state`, from
the installed `panda` as a person runs it: not `internal`, and never a log continued from
a record that contradicts itself (issue 48). The file is left as it was."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from p2panda_assets.authoring.state import STATE_FILE

PANDA = Path(sys.executable).parent / "panda"
State = dict[str, Any]


def panda(home: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """The installed `panda`, in `home`."""
    env = {**os.environ, "P2PANDA_HOME": str(home)}
    return subprocess.run(
        [str(PANDA), *argv], env=env, capture_output=True, text=True, timeout=120, cwd=home
    )


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A home whose key published one schema (`mail`) and one instance of it."""
    home = tmp_path_factory.mktemp("published")
    definition = home / "mail.yaml"
    definition.write_text("fields:\n  subject: {type: text}\n")
    story = home / "story.jsonl"
    for argv in (
        ("key", "new"),
        ("schema", "mail", "init", "--file", str(definition), "--out", str(story)),
        ("publish", "create", "--schema", "mail", "--field", "subject=hi", "--out", str(story)),
    ):
        result = panda(home, *argv)
        assert result.returncode == 0, result.stderr
    return home


@pytest.fixture
def home(published: Path, tmp_path: Path) -> Path:
    """A copy of the published home, for one test to damage."""
    copy = tmp_path / "home"
    copy.mkdir(mode=0o700)
    for name in ("author.key", STATE_FILE):
        (copy / name).write_bytes((published / name).read_bytes())
        (copy / name).chmod(0o600)
    return copy


def the_author(state: State) -> State:
    return next(iter(state["authors"].values()))


def the_log(state: State, kind: str) -> State:
    return next(log for log in the_author(state)["logs"].values() if log["kind"] == kind)


def damage(home: Path, change: Callable[[State], None]) -> bytes:
    """Apply `change` to the stored state's JSON; the bytes now stored."""
    path = home / STATE_FILE
    state = json.loads(path.read_text())
    change(state)
    path.write_text(json.dumps(state))
    return path.read_bytes()


def assert_refused(home: Path, stored: bytes, detail: str) -> None:
    """A new schema is refused with `bad-state` naming `detail`; nothing is written."""
    out = home / "new.jsonl"
    result = panda(home, "schema", "other", "init", "--out", str(out))
    state = home / STATE_FILE
    assert result.returncode == 1, result.stderr
    assert result.stderr.startswith(f"error: bad-state: {state} is damaged: "), result.stderr
    assert detail in result.stderr, result.stderr
    assert "internal" not in result.stderr
    assert result.stdout == ""
    assert state.read_bytes() == stored and not out.exists()


def test_the_undamaged_copy_is_accepted(home: Path) -> None:
    result = panda(home, "schema", "other", "init", "--out", str(home / "new.jsonl"))
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    ("stored", "detail"),
    [
        (b'{"format": 1, "authors": {', "not JSON (Expecting property name"),
        (b"", "not JSON (Expecting value"),
        (b"\xff\xfe{}", "not UTF-8 text"),
        (b"[" * 100_000, "JSON nested too deeply"),
        (b"[1, 2]", "the file is not a JSON object"),
        (b'{"format": 2, "authors": {}}', "unknown format 2"),
        (b'{"format": 1}', "the file has no 'authors'"),
        (b'{"format": 1, "authors": []}', '"authors" is not a JSON object'),
        (b'{"format": 1, "authors": {"ab": {}}}', "'ab' is not an author key"),
    ],
    ids=[
        "cut-short",
        "empty",
        "not-utf8",
        "deep",
        "list",
        "format",
        "no-authors",
        "authors",
        "author-key",
    ],
)
def test_a_file_that_is_not_a_state_is_bad_state(home: Path, stored: bytes, detail: str) -> None:
    (home / STATE_FILE).write_bytes(stored)
    assert_refused(home, stored, detail)


def set_next_log_id(value: object) -> Callable[[State], None]:
    return lambda state: the_author(state).update(next_log_id=value)


def drop(key: str) -> Callable[[State], None]:
    return lambda state: the_author(state).pop(key)


def repoint_schema(state: State) -> None:
    the_author(state)["schemas"]["mail"]["log_id"] = 9


def cut_hash(state: State) -> None:
    the_log(state, "schema")["hashes"]["1"] = "0020"


def skip_seq(state: State) -> None:
    hashes = the_log(state, "schema")["hashes"]
    hashes["3"] = hashes.pop("1")


def drop_payloads(state: State) -> None:
    the_log(state, "schema")["payloads"] = {}


def orphan_instance_log(state: State) -> None:
    the_author(state)["instance_logs"] = {}


def unknown_kind(state: State) -> None:
    the_log(state, "instances")["kind"] = "other"


def not_a_flag(state: State) -> None:
    instances = the_log(state, "instances")["instances"]
    instances[next(iter(instances))] = "no"


@pytest.mark.parametrize(
    ("change", "detail"),
    [
        # A new log would take the id of one that holds entries: a fork of it.
        (set_next_log_id(1), "log 1 is not below next_log_id"),
        (set_next_log_id("3"), "next_log_id is not a number"),
        (set_next_log_id(True), "next_log_id is not a number"),
        (drop("logs"), "has no 'logs'"),
        (repoint_schema, "schema 'mail' has no schema log 9"),
        (cut_hash, "log 1: hash of seq 1 is not an entry hash"),
        (skip_seq, "log 1 does not hold seq nums 1..2"),
        (drop_payloads, "log 1 lacks the payload of an entry"),
        (orphan_instance_log, "log 2 is no schema's instance log"),
        (unknown_kind, "log 2 has unknown kind 'other'"),
        (not_a_flag, "deleted is not true or false"),
    ],
    ids=[
        "overlapping-log-id",
        "string-id",
        "bool-id",
        "no-logs",
        "schema-log",
        "hash",
        "seq-gap",
        "payloads",
        "instance-log",
        "kind",
        "deleted",
    ],
)
def test_a_state_of_the_wrong_shape_is_bad_state(
    home: Path, change: Callable[[State], None], detail: str
) -> None:
    assert_refused(home, damage(home, change), detail)
