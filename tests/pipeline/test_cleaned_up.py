"""A step's cleanup never hides why the step failed (`jvm_failures.cleaned_up`): a Spark
JVM that died under a step fails the cleanup's calls too, and that error hid an
out-of-memory from the code that names it."""

from __future__ import annotations

import pytest

from p2panda_assets.pipeline.spark.jvm_failures import cleaned_up


def test_a_failed_block_raises_its_own_error_and_every_cleanup_runs() -> None:
    ran: list[str] = []

    def failing_cleanup() -> None:
        ran.append("first")
        raise RuntimeError("the JVM is gone")

    with pytest.raises(MemoryError), cleaned_up(failing_cleanup, lambda: ran.append("second")):
        raise MemoryError("the step's own error")
    assert ran == ["first", "second"]


def test_after_a_block_that_passed_a_failing_cleanup_is_raised() -> None:
    def failing_cleanup() -> None:
        raise RuntimeError("cannot release")

    with pytest.raises(RuntimeError, match="cannot release"), cleaned_up(failing_cleanup):
        pass
