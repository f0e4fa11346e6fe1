"""Every reason code of the one documented list is proved by at least one test that
names it, so a new code cannot land untested."""

from __future__ import annotations

from pathlib import Path

from p2panda_assets.errors import Reason

TESTS = Path(__file__).parent


def test_every_reason_code_is_named_by_a_test() -> None:
    sources = "\n".join(
        path.read_text() for path in TESTS.rglob("*.py") if path.name != Path(__file__).name
    )
    untested = [
        reason.value
        for reason in Reason
        if f"Reason.{reason.name}" not in sources
        and f"error: {reason.value}:" not in sources
        and f'"{reason.value}"' not in sources
    ]
    assert untested == []
