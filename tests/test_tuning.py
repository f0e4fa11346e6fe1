"""The pipeline's knobs are one frozen object read from the environment in one place
(`p2panda_assets.tuning`, issue 55), and a test changes them by putting one in force."""

from __future__ import annotations

import ast
from dataclasses import FrozenInstanceError, fields, replace
from pathlib import Path

import pytest

import p2panda_assets
from p2panda_assets.errors import P2pandaError
from p2panda_assets.tuning import DEFAULTS, ENVIRONMENT, PipelineTuning, tuned, tuning

PACKAGE = Path(p2panda_assets.__file__).resolve().parent

# The modules that read the environment, and why each may.
READERS = {
    "tuning.py": "every knob of the pipeline",
    "home.py": "P2PANDA_HOME, where everything lives",
    "store/database.py": "P2PANDA_DATABASE_URL, the store to connect to",
    "failpoints.py": "the fault tests' failpoints",
    "defs/orchestration.py": "the Dagster home and the database URL it hands Dagster",
    "cli/demo_cmd.py": "the demo's own P2PANDA_HOME",
    "cli/quiet.py": "Spark's log level for --verbose",
    "cli/server_cmd.py": "whether an external server is configured",
    "pipeline/spark/session.py": "JAVA_HOME, PYSPARK_PYTHON, and the JVM options of a short run",
    "pipeline/spark/class_archive.py": "the environment of the JVM that builds the archive",
}


def test_every_variable_names_a_field() -> None:
    names = {f.name for f in fields(PipelineTuning)}
    assert set(ENVIRONMENT) <= names
    assert all(env.startswith("P2PANDA_") or env == "SPARK_MASTER" for env in ENVIRONMENT.values())


def test_the_environment_sets_what_it_names_and_nothing_else() -> None:
    read = PipelineTuning.from_environment(
        {
            "P2PANDA_DRIVER_PATH_ENTRIES": "-1",
            "P2PANDA_LOCK_WAIT_SECONDS": " 2.5 ",
            "P2PANDA_WAREHOUSE": "s3a://bucket/root",
            "P2PANDA_SHUFFLE_PARTITIONS": "",
            "P2PANDA_UNKNOWN": "7",
        }
    )
    assert read == replace(
        DEFAULTS, driver_path_entries=-1, lock_wait_seconds=2.5, warehouse="s3a://bucket/root"
    )
    assert PipelineTuning.from_environment({}) == DEFAULTS


def test_a_value_that_is_no_number_is_bad_input_naming_the_variable() -> None:
    with pytest.raises(P2pandaError, match="P2PANDA_ENTRIES_PER_PARTITION='many'"):
        PipelineTuning.from_environment({"P2PANDA_ENTRIES_PER_PARTITION": "many"})
    with pytest.raises(P2pandaError, match="P2PANDA_SPARK_STALL_TIMEOUT='soon' is not a number"):
        PipelineTuning.from_environment({"P2PANDA_SPARK_STALL_TIMEOUT": "soon"})


def test_a_tuning_put_in_force_holds_inside_its_block_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("P2PANDA_APPEND_MIN_ENTRIES", "5")
    assert tuning().append_min_entries == 5
    with tuned(replace(DEFAULTS, max_layers=2)) as chosen:
        assert tuning() is chosen
        assert tuning().append_min_entries == DEFAULTS.append_min_entries
    assert tuning().max_layers == DEFAULTS.max_layers
    with pytest.raises(FrozenInstanceError):
        chosen.max_layers = 3  # type: ignore[misc]


def test_the_tune_fixture_changes_one_knob(tune) -> None:
    tune(flush_rows=7)
    assert tuning() == replace(PipelineTuning.from_environment(), flush_rows=7)


def test_only_the_listed_modules_read_the_environment() -> None:
    readers = set()
    for module in PACKAGE.rglob("*.py"):
        tree = ast.parse(module.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and node.attr in {"environ", "getenv"}
                and isinstance(node.value, ast.Name)
                and node.value.id == "os"
            ):
                readers.add(str(module.relative_to(PACKAGE)))
    assert readers == set(READERS)
