"""The slothmail story (the demo's author) served to a test database through the
real commands: `panda ingest`, `register --name`, `materialize` (Dagster, Spark)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from p2panda_assets.cli.demo_cmd import Author, write_story_until_revert
from p2panda_assets.cli.main import main
from p2panda_assets.jsonlines import entry_line, read_entry_lines
from p2panda_assets.protocol.entry import decode_entry

Panda = Callable[..., tuple[int, str, str]]
"""`panda(*argv)` -> (exit code, stdout, stderr), run in this process."""

NAMES = ("profile", "attachment", "slothmail")


def panda_runner(capsys: pytest.CaptureFixture[str]) -> Panda:
    def run(*argv: str | int | Path) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main([str(arg) for arg in argv])
        out, err = capsys.readouterr()
        return code, out, err

    return run


def ok(result: tuple[int, str, str]) -> str:
    code, out, err = result
    assert code == 0, err
    return out


@dataclass
class Story:
    author: Author
    file: Path
    ids: dict[str, str]  # instance ids by role, from `write_story_until_revert`

    @property
    def slothmail(self) -> str:
        return self.author.schema_id("slothmail")

    def revert(self) -> None:
        """Version 5 of slothmail: revert to version 3 (version 4 dead)."""
        self.author.run("schema", "slothmail", "revert", "--target", "3", "--yes")

    def serve(self, panda: Panda) -> None:
        """Ingest the whole file, register the three schemas by name, materialize."""
        ok(panda("ingest", self.file))
        for name in NAMES:
            author_hex, log_id = self.author.schema_id(name).rsplit("-", 1)
            ok(panda("register", author_hex, log_id, "--name", name))
        ok(panda("materialize"))

    def cut(self, version: int, out: Path) -> Path:
        """The file without the entries of slothmail's schema log after `version`."""
        author_hex, log_id = self.slothmail.rsplit("-", 1)
        lines = []
        for item in read_entry_lines([self.file]):
            assert isinstance(item, tuple)
            entry, payload = item
            decoded = decode_entry(entry)
            in_log = (decoded.author.hex(), decoded.log_id) == (author_hex, int(log_id))
            if in_log and decoded.seq_num > version:
                continue
            assert payload is not None
            lines.append(entry_line(entry, payload))
        out.write_text("\n".join(lines) + "\n")
        return out


def write_story(scratch: Path) -> Story:
    """Authored up to slothmail version 4 (before the revert)."""
    file = scratch / "story.jsonl"
    author = Author(scratch / "author", file)
    return Story(author, file, write_story_until_revert(author))


def preview_rows(panda: Panda, file: Path, schema_id: str) -> list[dict]:
    out = ok(panda("preview", file, "--schema", schema_id, "--trace"))
    return [json.loads(line) for line in out.splitlines()]
