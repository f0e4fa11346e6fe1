"""Store test data; the PostgreSQL fixtures are in tests/conftest.py."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from p2panda_assets.testing.builder import CorpusBuilder, create_field, instances


def small_corpus(seed: int = 1) -> list[tuple[bytes, bytes]]:
    """A schema log of two entries and an instance log of three: five good pairs."""
    corpus = CorpusBuilder()
    schema = corpus.author(seed).schema(7, "note")
    schema.migrate(create_field("title", "text"))
    writer = instances(corpus.author(seed + 100), 1)
    note = writer.create(schema.ref(2), title="hello")
    writer.update(schema.ref(2), note, title="hello again")
    writer.delete(note)
    return corpus.pairs


@pytest.fixture
def pairs() -> list[tuple[bytes, bytes]]:
    return small_corpus()


@pytest.fixture
def jsonl(tmp_path: Path) -> Callable[[str, list[str]], Path]:
    """Write lines to a file in the test's directory; its path."""

    def write(name: str, lines: list[str]) -> Path:
        path = tmp_path / name
        path.write_text("".join(line + "\n" for line in lines))
        return path

    return write
