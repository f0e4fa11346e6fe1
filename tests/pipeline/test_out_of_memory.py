"""A run that outgrows Spark's heap fails as `out-of-memory`, naming the settings that
decide what a task holds, and leaves the tables as they were and no stage behind: the
JVM dies (Spark's exit code 52), the database connection does not."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from p2panda_assets.errors import Reason
from p2panda_assets.pipeline.spark.session import ENTRIES_PER_PARTITION_ENV

pytestmark = [pytest.mark.spark, pytest.mark.postgres]

ROOT = Path(__file__).resolve().parents[2]
DRIVER_TIMEOUT = 300  # seconds for the whole subprocess (a JVM start and two runs)


def test_a_run_out_of_heap_fails_as_out_of_memory_and_keeps_the_tables(
    database_url: str,
) -> None:
    env = {**os.environ, "P2PANDA_DRIVER_MEMORY": "512m"}
    done = subprocess.run(
        [sys.executable, "-m", "tests.pipeline.oom_check", database_url],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=DRIVER_TIMEOUT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    evidence = json.loads(done.stdout.strip().splitlines()[-1])
    assert evidence["reason"] == Reason.OUT_OF_MEMORY.value, evidence
    assert ENTRIES_PER_PARTITION_ENV in evidence["message"]
    assert "P2PANDA_DRIVER_MEMORY=512m" in evidence["message"]
    assert evidence["exit_code"] == 52
    assert evidence["rows"] > 0
    assert evidence["tables_kept"] is True
    assert evidence["stage_tables"] == []
