"""Helpers for the authoring tests: read command output and story files back."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from p2panda_assets.engine.corpus import Corpus, reduce_corpus
from p2panda_assets.jsonlines import read_entry_lines

RESOURCES = Path(__file__).resolve().parents[2] / "resources"

Run = Callable[..., tuple[int, str, str]]
"""`panda(*argv)` -> (exit code, stdout, stderr)."""


def ok(result: tuple[int, str, str]) -> str:
    """The stdout of a command that must succeed (its stderr shown if it did not)."""
    code, out, err = result
    assert code == 0, err
    return out.strip()


def preview(panda: Run, story: Path, schema_id: str) -> dict[str, dict]:
    """`panda preview`'s rows, by instance id."""
    rows = [
        json.loads(line) for line in ok(panda("preview", story, "--schema", schema_id)).splitlines()
    ]
    return {row["_instance_id"]: row for row in rows}


def corpus_of(*paths: Path) -> Corpus:
    return reduce_corpus(item for item in read_entry_lines(paths) if isinstance(item, tuple))
