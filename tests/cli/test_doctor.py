"""Issue 56: `panda doctor` says, one line per check, whether the machine can run the
pipeline (Java, the JDBC driver, PostgreSQL, Dagster's home, the warehouse, the Spark
master) and how to fix what cannot; and every command that starts Spark looks for Java
and the JDBC driver first, so a missing jar is one `error: setup:` line, not Spark's
stack traces. Nothing here starts Spark."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import zipfile
from importlib import resources
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest

from p2panda_assets.cli.main import main
from p2panda_assets.pipeline.spark.session import jdbc_jar
from p2panda_assets.setup_checks import (
    dagster_home,
    java,
    java_major,
    jdbc_driver,
    spark_master,
    warehouse,
)
from p2panda_assets.store.database import DATABASE_URL_ENV
from p2panda_assets.store.registry import registered_schemas

PANDA = Path(sys.executable).parent / "panda"
NAMES = ("java", "jdbc driver", "postgresql", "dagster home", "warehouse", "spark master")
LINE = re.compile(rf"(ok|problem) +({'|'.join(NAMES)}) +(.*)")
SCHEMA_ID = f"{'ab' * 32}-1"
NO_SERVER = "postgresql://nobody@127.0.0.1:1/none"  # were anything to connect: it fails


def no_jar(path: Path) -> str:
    """What the JDBC driver's check says when `path` is missing, with the fix."""
    return (
        f"the PostgreSQL JDBC driver is not at {path} (set P2PANDA_JDBC_JAR, or run scripts/setup)"
    )


def doctor(capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, tuple[str, str]], str]:
    """Exit code, each check's (status, detail) by name in the order printed, stderr."""
    code = main(["doctor"])
    out, err = capsys.readouterr()
    lines = [LINE.fullmatch(line) for line in out.splitlines()]
    assert all(lines), out
    return code, {m[2]: (m[1], m[3]) for m in lines if m}, err


@pytest.fixture
def dagster_yaml(p2panda_home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A Dagster home holding the package's dagster.yaml, as a command writes it."""
    home = p2panda_home / "dagster"
    home.mkdir(parents=True)
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    with resources.as_file(resources.files("p2panda_assets") / "dagster.yaml") as template:
        shutil.copyfile(template, home / "dagster.yaml")
    return home / "dagster.yaml"


# --- panda doctor ---------------------------------------------------------------------


@pytest.mark.postgres
def test_on_a_working_setup_every_check_is_ok(
    capsys: pytest.CaptureFixture[str], database_url: str, dagster_yaml: Path
) -> None:
    code, found, err = doctor(capsys)
    assert (code, err) == (0, "")
    assert tuple(found) == NAMES
    assert {status for status, _ in found.values()} == {"ok"}
    assert found["jdbc driver"][1].startswith(f"{jdbc_jar()}, version ")
    assert found["postgresql"][1].startswith("P2PANDA_DATABASE_URL at ")
    assert ", PostgreSQL " in found["postgresql"][1]
    assert found["dagster home"][1] == str(dagster_yaml)


@pytest.mark.postgres
def test_a_missing_jdbc_driver_is_the_one_problem_with_its_fix(
    capsys: pytest.CaptureFixture[str],
    database_url: str,
    dagster_yaml: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    missing = tmp_path / "nowhere" / "postgresql.jar"
    monkeypatch.setenv("P2PANDA_JDBC_JAR", str(missing))
    code, found, err = doctor(capsys)
    assert code == 1
    assert found.pop("jdbc driver") == ("problem", no_jar(missing))
    assert {status for status, _ in found.values()} == {"ok"}
    assert err == "error: setup: 1 of 6 checks found a problem: jdbc driver\n"


@pytest.mark.postgres
def test_a_server_that_refuses_the_login_is_a_problem(
    capsys: pytest.CaptureFixture[str],
    database_url: str,
    dagster_yaml: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    parts = urlsplit(database_url)
    login = f"{parts.username}:not-the-password@{parts.hostname}:{parts.port}"
    wrong = parts._replace(netloc=login).geturl()
    monkeypatch.setenv(DATABASE_URL_ENV, wrong)
    code, found, _ = doctor(capsys)
    status, detail = found["postgresql"]
    assert (code, status) == (1, "problem")
    assert detail.startswith("P2PANDA_DATABASE_URL refuses: ")
    assert detail.endswith("(fix the user, password or database in the URL)")
    assert "not-the-password" not in detail


def test_a_jar_that_is_not_the_driver_is_a_problem(tmp_path: Path, tune) -> None:
    text = tmp_path / "postgresql.jar"
    text.write_text("not a jar")
    tune(jdbc_jar=str(text))
    assert not jdbc_driver().ok
    assert f"{text} is not a readable jar" in jdbc_driver().detail
    other = tmp_path / "other.jar"
    with zipfile.ZipFile(other, "w") as jar:
        jar.writestr("org/example/Driver.class", b"")
    tune(jdbc_jar=str(other))
    assert jdbc_driver().detail == (
        f"{other} holds no org/postgresql/Driver.class"
        " (set P2PANDA_JDBC_JAR to the PostgreSQL JDBC driver's jar)"
    )


def test_a_java_too_old_for_spark_is_a_problem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    binary = tmp_path / "jdk8" / "bin" / "java"
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\necho 'openjdk version \"1.8.0_292\"' >&2\n")
    binary.chmod(0o755)
    monkeypatch.setenv("JAVA_HOME", str(binary.parents[1]))
    found = java()
    assert not found.ok
    assert found.detail == (
        f"{binary} is Java 1.8.0_292, too old for Spark (set JAVA_HOME to a Java 17 or later)"
    )
    assert [java_major(v) for v in ("1.8.0_292", "11.0.2", "17.0.15", "21-ea")] == [8, 11, 17, 21]


def test_a_warehouse_that_cannot_be_written_is_a_problem(tmp_path: Path, tune) -> None:
    taken = tmp_path / "a-file"
    taken.write_text("")
    tune(warehouse=f"file://{taken}/warehouse")
    assert warehouse().detail == (
        f"{taken}/warehouse cannot be created in {taken} (fix that, or set P2PANDA_WAREHOUSE)"
    )
    tune(warehouse="s3a://bucket/p2panda")
    assert warehouse().ok


def test_a_spark_master_is_reached_over_tcp(tune) -> None:
    with socket.create_server(("127.0.0.1", 0)) as master:
        port = master.getsockname()[1]
        tune(spark_master=f"spark://127.0.0.1:{port}")
        assert spark_master().ok
    tune(spark_master=f"spark://127.0.0.1:{port}")  # closed now: nothing answers
    assert spark_master().detail == (
        f"nothing answers at spark://127.0.0.1:{port} (start the master, or fix SPARK_MASTER)"
    )


def test_a_dagster_yaml_dagster_refuses_is_a_problem(dagster_yaml: Path) -> None:
    dagster_yaml.write_text(dagster_yaml.read_text() + "run_queues: {}\n")
    found = dagster_home()
    assert not found.ok
    assert found.detail.startswith(f"Dagster refuses {dagster_yaml}: ")
    assert '"run_queues"' in found.detail


# --- the preflight of the commands that start Spark -------------------------------------


@pytest.mark.parametrize(
    "argv",
    [("materialize",), ("materialize", "--as-of-version", "2", SCHEMA_ID), ("demo",)],
)
def test_a_missing_jdbc_driver_is_one_line_before_anything_starts(
    tmp_path: Path, argv: tuple[str, ...]
) -> None:
    """The installed command, as a user runs it: one line, no trace of Java or Python,
    and nothing started or written (not even the home)."""
    home, missing = tmp_path / "home", tmp_path / "nowhere" / "postgresql.jar"
    env = {
        **os.environ,
        "P2PANDA_HOME": str(home),
        "P2PANDA_JDBC_JAR": str(missing),
        DATABASE_URL_ENV: NO_SERVER,
    }
    done = subprocess.run([str(PANDA), *argv], capture_output=True, text=True, env=env)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == f"error: setup: {no_jar(missing)}\n"
    assert not home.exists()


def test_without_java_the_preflight_says_so(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "P2PANDA_HOME": str(tmp_path / "home"),
        "JAVA_HOME": str(tmp_path / "no-jdk"),
        DATABASE_URL_ENV: NO_SERVER,
    }
    done = subprocess.run([str(PANDA), "materialize"], capture_output=True, text=True, env=env)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        "error: setup: no java in $JAVA_HOME/bin or on PATH (set JAVA_HOME, or run scripts/setup)\n"
    )


@pytest.mark.postgres
def test_ensure_looks_for_the_driver_before_it_registers_anything(
    capsys: pytest.CaptureFixture[str],
    conn: psycopg.Connection,
    p2panda_home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    missing = tmp_path / "nowhere" / "postgresql.jar"
    monkeypatch.setenv("P2PANDA_JDBC_JAR", str(missing))
    monkeypatch.setenv("DAGSTER_HOME", str(p2panda_home / "dagster"))
    code = main(["ensure", SCHEMA_ID, "1"])
    assert (code, *capsys.readouterr()) == (1, "", f"error: setup: {no_jar(missing)}\n")
    assert registered_schemas(conn) == []
