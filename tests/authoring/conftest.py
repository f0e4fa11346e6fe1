"""Fixtures for driving `panda` in-process in a private `$P2PANDA_HOME`."""

from __future__ import annotations

from pathlib import Path

import pytest

from p2panda_assets.cli.main import main
from tests.authoring.helpers import Run


@pytest.fixture
def panda(capsys: pytest.CaptureFixture[str], p2panda_home: Path) -> Run:
    """`panda(*argv)` -> (exit code, stdout, stderr)."""

    def run(*argv: str | Path) -> tuple[int, str, str]:
        code = main([str(arg) for arg in argv])
        out, err = capsys.readouterr()
        return code, out, err

    return run


@pytest.fixture
def keyed(panda: Run) -> Run:
    """`panda` with a key already made."""
    code, _, _ = panda("key", "new")
    assert code == 0
    return panda
