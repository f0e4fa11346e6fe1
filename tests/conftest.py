"""Shared fixtures: the p2panda-js vectors and a private `$P2PANDA_HOME` per test."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="session")
def vectors() -> dict:
    return json.loads((DATA / "p2panda-vectors.json").read_text())


@pytest.fixture
def p2panda_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("P2PANDA_HOME", str(home))
    return home
