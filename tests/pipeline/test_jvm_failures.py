"""Which errors out of a call into Spark mean its JVM ran out of heap (`jvm_failures`).

The errors are py4j's own classes; the session is a stand-in that only answers what
`jvm_exit_code` asks (its launcher process), so each case names the JVM's state. The
real JVM dying of a too-large task is `test_out_of_memory.py`'s."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest
from py4j.protocol import Py4JJavaError, Py4JNetworkError  # type: ignore[import-untyped]

from p2panda_assets.pipeline.spark.jvm_failures import (
    SPARK_OOM_EXIT,
    heap_bytes,
    out_of_memory_message,
    ran_out_of_memory,
)


@dataclass
class Launcher:
    """The JVM's process as `subprocess.Popen` shows it: exited with `code`, or running."""

    code: int | None
    waited: bool = False

    def wait(self, timeout: float) -> int:
        self.waited = True
        if self.code is None:
            raise subprocess.TimeoutExpired("java", timeout)
        return self.code


def session(launcher: Launcher) -> Any:
    return SimpleNamespace(sparkContext=SimpleNamespace(_gateway=SimpleNamespace(proc=launcher)))


class JavaError(Py4JJavaError):
    """A Py4JJavaError with the text the JVM would give, or none once it is gone."""

    def __init__(self, text: str | None) -> None:
        self.text = text

    def __str__(self) -> str:
        if self.text is None:
            raise Py4JNetworkError("Answer from Java side is empty")
        return self.text


OOM_TEXT = (
    "An error occurred while calling o1.collect.\n: java.lang.OutOfMemoryError: Java heap space"
)
SHUT_DOWN = "org.apache.spark.SparkException: Job 4 cancelled because SparkContext was shut down"


@pytest.mark.parametrize(
    ("error", "jvm", "expected"),
    [
        (JavaError(OOM_TEXT), None, True),  # the JVM names it
        (JavaError(SHUT_DOWN), SPARK_OOM_EXIT, True),  # exiting: its code says why
        (JavaError(SHUT_DOWN), 1, False),
        (JavaError(None), SPARK_OOM_EXIT, True),  # unreadable: the JVM is gone
        (ConnectionRefusedError(111, "Connection refused"), SPARK_OOM_EXIT, True),
        (ConnectionRefusedError(111, "Connection refused"), 137, False),
        (ConnectionRefusedError(111, "Connection refused"), None, False),  # still running
    ],
)
def test_an_error_is_out_of_memory_by_its_text_or_the_jvms_exit_code(
    error: BaseException, jvm: int | None, expected: bool
) -> None:
    assert ran_out_of_memory(session(Launcher(jvm)), error) is expected


def test_a_java_error_from_a_live_jvm_does_not_wait_for_its_exit() -> None:
    launcher = Launcher(None)
    error = JavaError("org.apache.spark.sql.AnalysisException: column x not found")
    assert ran_out_of_memory(session(launcher), error) is False
    assert launcher.waited is False


def test_out_of_memory_names_the_logs_when_the_index_steps_state_per_log_grew(tune) -> None:
    """A store of many small logs (100,000 authors: ~500,000 logs) outgrows a 512m driver
    in the index step, which holds a plan and a summary per log: the message names them
    and a heap that holds them; a store of few logs gets the advice on tasks."""
    tune(driver_memory="512m")
    many = out_of_memory_message("local[2]", logs=500_000)
    assert "the store's 500,000 logs" in many and "(~572 MiB)" in many
    assert "P2PANDA_DRIVER_MEMORY=2304m or more" in many
    assert "P2PANDA_ENTRIES_PER_PARTITION" not in many
    few = out_of_memory_message("local[2]", logs=5_000)
    assert "P2PANDA_ENTRIES_PER_PARTITION lower" in few and "logs" not in few
    assert out_of_memory_message("local[2]") == few


def test_heap_settings_are_read_as_the_jvm_reads_them() -> None:
    assert [heap_bytes(m) for m in ("512m", "2g", "1024k", "4096", "1.5G")] == [
        512 * 2**20,
        2 * 2**30,
        2**20,
        4096,
        int(1.5 * 2**30),
    ]
