"""Issue 14: the README's authoring walk-through works as written. Its block is read from
README.md's first fenced block under "The command line" (so the README cannot drift from
what is tested) and pasted, as it is, into bash, from an empty `$P2PANDA_HOME` in a
directory that has the repository's `resources/` and `.venv/` (issue 49: `panda` is not
on PATH after `scripts/setup`, so the block's first line puts it there). No Spark, no
database."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VENV = Path(sys.executable).parent.parent  # the `.venv` these tests run in


def walk_through() -> str:
    """The block, as a reader copies it."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("\n## The command line\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^```bash\n(.*?)^```", section, re.MULTILINE | re.DOTALL)[0]


def authoring_commands() -> list[list[str]]:
    """The argv of each command of the walk-through (comments and blank lines left out)."""
    commands = [shlex.split(line, comments=True) for line in walk_through().splitlines()]
    return [argv for argv in commands if argv]


def test_the_walk_through_puts_panda_on_path_then_starts_from_a_new_key() -> None:
    first, *commands = authoring_commands()
    assert first == [".", ".venv/bin/activate"]
    assert all(argv[0] == "panda" for argv in commands)
    assert commands[0] == ["panda", "key", "new"]
    assert {argv[1] for argv in commands} == {"key", "schema", "publish", "preview"}


def test_the_story_file_it_writes_in_the_repository_is_ignored() -> None:
    commands = authoring_commands()
    outs = {argv[argv.index("--out") + 1] for argv in commands if "--out" in argv}
    assert outs == {"story.jsonl"}
    assert "/story.jsonl" in (ROOT / ".gitignore").read_text().splitlines()


def test_the_walk_through_pasted_into_bash_runs_from_an_empty_home(
    p2panda_home: Path, tmp_path: Path
) -> None:
    assert not p2panda_home.exists()
    work = tmp_path / "work"
    work.mkdir()
    (work / "resources").symlink_to(ROOT / "resources")
    (work / ".venv").symlink_to(VENV)
    path = os.pathsep.join(
        p for p in os.environ["PATH"].split(os.pathsep) if Path(p) != VENV / "bin"
    )
    env = {**os.environ, "P2PANDA_HOME": str(p2panda_home), "PATH": path}
    env.pop("VIRTUAL_ENV", None)
    shell = subprocess.run(
        ["bash", "-e"], input=walk_through(), cwd=work, env=env, capture_output=True, text=True
    )
    assert shell.returncode == 0, shell.stderr
    assert (work / "story.jsonl").is_file()
    rows = [json.loads(line) for line in shell.stdout.splitlines() if line.startswith("{")]
    # What the block's comments say the two previews show: the subject written at
    # version 2 falls back to its default under version 4's validation, and the revert
    # to version 3 derives it again from the message, with the attachments column back.
    assert len(rows) == 2
    before, after = rows
    assert before["subject"] == "<Subject>"
    assert "attachments" not in before
    assert after["subject"] == "#1 Hi"
    assert after["attachments"] is None
    assert after["_instance_id"] == before["_instance_id"]
