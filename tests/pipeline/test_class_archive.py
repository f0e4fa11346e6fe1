"""The Spark driver's class archive: where it is, and that a new driver JVM maps the one
`scripts/setup` built, and ignores, without a word, one that does not fit (which setup
would not publish)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from p2panda_assets.pipeline.spark.class_archive import (
    ARCHIVE_DIR,
    ARCHIVE_ENV,
    OFF,
    ONE_JOB,
    archive_path,
    java_binary,
    maps,
)
from p2panda_assets.pipeline.spark.session import JAVA_OPTIONS_ENV


def test_the_archive_is_named_by_the_java_it_was_built_for(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv(ARCHIVE_ENV, raising=False)
    monkeypatch.delenv("JAVA_HOME", raising=False)
    installed = archive_path()
    assert installed is not None and installed.parent == ARCHIVE_DIR
    other = tmp_path / "jdk" / "bin" / "java"
    other.parent.mkdir(parents=True)
    other.write_bytes(b"another java")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))
    assert java_binary() == other
    assert archive_path() not in (None, installed)
    monkeypatch.setenv(ARCHIVE_ENV, OFF)
    assert archive_path() is None
    monkeypatch.setenv(ARCHIVE_ENV, str(tmp_path / "mine.jsa"))
    assert archive_path() == tmp_path / "mine.jsa"


def session(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", ONE_JOB], env=env, capture_output=True, text=True, timeout=300
    )


@pytest.mark.spark
def test_a_new_driver_maps_the_built_archive_and_ignores_one_that_does_not_fit(
    tmp_path: Path,
) -> None:
    base = {k: v for k, v in os.environ.items() if k not in (ARCHIVE_ENV, JAVA_OPTIONS_ENV)}
    archive = archive_path()
    assert archive is not None and archive.is_file(), "scripts/setup builds the archive"
    log = tmp_path / "classes.log"
    mapped = session({**base, JAVA_OPTIONS_ENV: f"-Xlog:class+load=info:file={log}"})
    assert mapped.returncode == 0, mapped.stderr[-3000:]
    lines = log.read_text().splitlines()
    from_archive = [line for line in lines if "source: shared objects file (top)" in line]
    # Spark's own classes come from the archive, not from its jars.
    assert any("org.apache.spark.sql.SparkSession " in line for line in from_archive)
    assert len(from_archive) > len(lines) // 2, (len(from_archive), len(lines))
    assert "cds" not in mapped.stdout + mapped.stderr

    garbage = tmp_path / "garbage.jsa"
    garbage.write_bytes(b"not an archive")
    ignored = session({**base, ARCHIVE_ENV: str(garbage)})
    assert ignored.returncode == 0, ignored.stderr[-3000:]
    assert "cds" not in ignored.stdout + ignored.stderr
    assert not maps(garbage)  # what setup asks before it publishes an archive
