"""The driver JVM's options (the product's own, the class archive if one is built, C1
alone for a short run on a small store, then P2PANDA_SPARK_JAVA_OPTIONS) and the session
settings of a pipeline step by the store's size."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from p2panda_assets.pipeline.spark.class_archive import ARCHIVE_ENV, OFF, QUIET
from p2panda_assets.pipeline.spark.session import (
    DRIVER_MEMORY_ENV,
    JAVA_OPTIONS_ENV,
    SHORT_RUN_JAVA_OPTIONS,
    SHORT_RUN_MAX_ENTRIES,
    SIZED_FOR_KEY,
    SMALL_STORE_ENTRIES,
    compiled_for_a_short_run,
    driver_memory,
    spark_config,
    step_settings,
)


def driver_options() -> list[str]:
    return spark_config("local[1]")["spark.driver.extraJavaOptions"].split()


def test_the_setting_follows_the_products_options(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ARCHIVE_ENV, OFF)
    monkeypatch.setenv(JAVA_OPTIONS_ENV, "-Xss4m  -Dsome.flag=1 ")
    options = driver_options()
    assert options[:2] == ["-Duser.timezone=UTC", "-XX:+UseParallelGC"]
    assert options[-2:] == ["-Xss4m", "-Dsome.flag=1"]
    monkeypatch.delenv(JAVA_OPTIONS_ENV)
    assert driver_options()[-1].startswith("-Dlog4j2.configurationFile=")


def test_a_built_archive_is_mapped_quietly_before_the_settings_options(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    archive = tmp_path / "spark.jsa"
    monkeypatch.setenv(ARCHIVE_ENV, str(archive))
    monkeypatch.setenv(JAVA_OPTIONS_ENV, "-Xss4m")
    assert not any("SharedArchiveFile" in o for o in driver_options())  # not built yet
    archive.write_bytes(b"")
    assert driver_options()[-3:] == [f"-XX:SharedArchiveFile={archive}", QUIET, "-Xss4m"]
    spaced = tmp_path / "a b"
    spaced.mkdir()
    (spaced / "spark.jsa").write_bytes(b"")
    monkeypatch.setenv(ARCHIVE_ENV, str(spaced / "spark.jsa"))
    assert not any("SharedArchiveFile" in o for o in driver_options())  # Spark would split it


def test_a_short_run_on_a_small_store_compiles_with_c1_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`panda materialize` on a store of at most SHORT_RUN_MAX_ENTRIES: C1 alone, before
    the user's options (so they can say otherwise), and the setting put back after."""
    monkeypatch.setenv(ARCHIVE_ENV, OFF)
    monkeypatch.setenv(JAVA_OPTIONS_ENV, "-XX:TieredStopAtLevel=4")
    with compiled_for_a_short_run(SHORT_RUN_MAX_ENTRIES):
        assert driver_options()[-2:] == [SHORT_RUN_JAVA_OPTIONS, "-XX:TieredStopAtLevel=4"]
    assert driver_options()[-1] == "-XX:TieredStopAtLevel=4"
    monkeypatch.delenv(JAVA_OPTIONS_ENV)
    with compiled_for_a_short_run(0):
        assert driver_options()[-1] == SHORT_RUN_JAVA_OPTIONS
    assert JAVA_OPTIONS_ENV not in os.environ
    with compiled_for_a_short_run(SHORT_RUN_MAX_ENTRIES + 1):
        assert SHORT_RUN_JAVA_OPTIONS not in driver_options()
    assert JAVA_OPTIONS_ENV not in os.environ


def test_a_step_on_a_small_store_has_one_shuffle_partition_and_no_adaptive_planning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("P2PANDA_SHUFFLE_PARTITIONS", "8")
    small = step_settings(SMALL_STORE_ENTRIES)
    assert small == {
        "spark.sql.shuffle.partitions": "1",
        SIZED_FOR_KEY: str(SMALL_STORE_ENTRIES),
        "spark.sql.adaptive.enabled": "false",
    }
    large = step_settings(4 * SMALL_STORE_ENTRIES + 1)
    assert large == {
        "spark.sql.shuffle.partitions": "5",
        SIZED_FOR_KEY: str(4 * SMALL_STORE_ENTRIES + 1),
    }


def test_the_heap_follows_the_cores_a_local_master_runs_tasks_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """256 MiB a core of a local master, never less than 512m; a cluster's driver runs no
    task: 512m. P2PANDA_DRIVER_MEMORY says otherwise."""
    monkeypatch.delenv(DRIVER_MEMORY_ENV, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    assert [driver_memory(m) for m in ("local", "local[2]", "local[*]", "local[3,4]")] == [
        "512m",
        "512m",
        "2048m",
        "768m",
    ]
    assert driver_memory("spark://master:7077") == "512m"
    monkeypatch.setenv(DRIVER_MEMORY_ENV, "3g")
    assert spark_config("local[*]")["spark.driver.memory"] == "3g"
