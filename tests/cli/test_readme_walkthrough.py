"""Issue 14: the README's authoring walk-through works as written. Its command lines are
read from README.md's first fenced block under "The command line" (so the README cannot
drift from what is tested) and run, in order, from an empty `$P2PANDA_HOME` in a
directory that has the repository's `resources/`. No Spark, no database."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from p2panda_assets.cli.main import main

ROOT = Path(__file__).resolve().parents[2]


def authoring_commands() -> list[list[str]]:
    """The argv of each command of the walk-through (comments and blank lines left out)."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("\n## The command line\n", 1)[1].split("\n## ", 1)[0]
    block = re.findall(r"^```bash\n(.*?)^```", section, re.MULTILINE | re.DOTALL)[0]
    commands = [shlex.split(line, comments=True) for line in block.splitlines()]
    return [argv for argv in commands if argv]


def test_the_walk_through_is_the_authors_side_from_a_new_key() -> None:
    commands = authoring_commands()
    assert all(argv[0] == "panda" for argv in commands)
    assert commands[0] == ["panda", "key", "new"]
    assert {argv[1] for argv in commands} == {"key", "schema", "publish", "preview"}


def test_the_walk_through_runs_as_written_from_an_empty_home(
    capsys: pytest.CaptureFixture[str],
    p2panda_home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert not p2panda_home.exists()
    work = tmp_path / "work"
    work.mkdir()
    (work / "resources").symlink_to(ROOT / "resources")
    monkeypatch.chdir(work)
    previews = []
    for argv in authoring_commands():
        code = main(argv[1:])
        out, err = capsys.readouterr()
        assert code == 0, f"{shlex.join(argv)}: {err}"
        if argv[1] == "preview":
            previews.append([json.loads(line) for line in out.splitlines()])
    # What the block's comments say the two previews show: the subject written at
    # version 2 falls back to its default under version 4's validation, and the revert
    # to version 3 derives it again from the message, with the attachments column back.
    assert len(previews) == 2
    before, after = previews
    assert [row["subject"] for row in before] == ["<Subject>"]
    assert "attachments" not in before[0]
    assert [row["subject"] for row in after] == ["#1 Hi"]
    assert after[0]["attachments"] is None
    assert after[0]["_instance_id"] == before[0]["_instance_id"]
