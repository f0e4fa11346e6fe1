"""The code location as Dagster loads it: the asset family of one schema partition, its
job, `workspace.yaml` and `dagster.yaml`. No Spark and no database: these tests guard the
wiring that `dagster dev` and `panda materialize` rely on."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest
import sqlalchemy
import yaml
from dagster._config import process_config, resolve_to_config_type
from dagster._core.instance.ref import InstanceRef
from dagster._core.remote_origin import InProcessCodeLocationOrigin
from dagster._core.workspace.load import location_origins_from_yaml_paths
from dagster_postgres import DagsterPostgresStorage
from dagster_postgres.utils import pg_url_from_config

import p2panda_assets
from p2panda_assets.definitions import defs
from p2panda_assets.defs.orchestration import JOB, SCHEMAS
from p2panda_assets.store.database import DATABASE_URL_ENV

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = Path(p2panda_assets.__file__).parent
FAMILY = ("raw_entries", "decoded_messages", "migration_plan", "materialized_table")

# The asset family as the UI shows it; a change here is a change of the product's surface.
SNAPSHOT = {
    "raw_entries": {
        "group": "p2panda",
        "kinds": ["postgres", "spark"],
        "partitions": ("dynamic", "schemas"),
        "deps": [],
    },
    "decoded_messages": {
        "group": "p2panda",
        "kinds": ["parquet", "spark"],
        "partitions": ("dynamic", "schemas"),
        "deps": ["raw_entries"],
    },
    "migration_plan": {
        "group": "p2panda",
        "kinds": ["python"],
        "partitions": ("dynamic", "schemas"),
        "deps": ["decoded_messages"],
    },
    "materialized_table": {
        "group": "p2panda",
        "kinds": ["postgres", "spark"],
        "partitions": ("dynamic", "schemas"),
        "deps": ["decoded_messages", "migration_plan"],
    },
}


def partitions_of(spec: dg.AssetSpec) -> tuple[str, str | None]:
    definition = spec.partitions_def
    if isinstance(definition, dg.DynamicPartitionsDefinition):
        return ("dynamic", definition.name)
    return (type(definition).__name__, None)


def test_asset_family_matches_the_snapshot() -> None:
    """Keys, groups, kinds, partitions and dependencies, in one comparison."""
    found = {
        spec.key.to_user_string(): {
            "group": spec.group_name,
            "kinds": sorted(spec.kinds),
            "partitions": partitions_of(spec),
            "deps": sorted(dep.asset_key.to_user_string() for dep in spec.deps),
        }
        for spec in defs.resolve_all_asset_specs()
    }
    assert found == SNAPSHOT


def test_definitions_are_loadable_as_dagster_validates_them() -> None:
    dg.Definitions.validate_loadable(defs)


def test_every_asset_is_partitioned_by_the_one_schemas_definition() -> None:
    """One partition per schema id, shared by the whole family (a partition key names the
    same schema in every asset)."""
    graph = defs.resolve_asset_graph()
    assert {key.to_user_string() for key in graph.get_all_asset_keys()} == set(FAMILY)
    for key in graph.get_all_asset_keys():
        definition = graph.get(key).partitions_def
        assert isinstance(definition, dg.DynamicPartitionsDefinition)
        assert definition.name == SCHEMAS


def test_dependencies_run_from_raw_entries_to_the_table() -> None:
    graph = defs.resolve_asset_graph()

    def parents(name: str) -> set[str]:
        return {key.to_user_string() for key in graph.get(dg.AssetKey(name)).parent_keys}

    assert parents("raw_entries") == set()
    assert parents("decoded_messages") == {"raw_entries"}
    assert parents("migration_plan") == {"decoded_messages"}
    assert parents("materialized_table") == {"migration_plan", "decoded_messages"}
    assert graph.toposorted_asset_keys == [dg.AssetKey(name) for name in FAMILY]


def test_the_materialize_schema_job_runs_the_whole_family_per_schema() -> None:
    job = defs.resolve_job_def(JOB)
    assert isinstance(job.partitions_def, dg.DynamicPartitionsDefinition)
    assert job.partitions_def.name == SCHEMAS
    selected = {key.to_user_string() for key in job.asset_layer.selected_asset_keys}
    assert selected == set(FAMILY)


def test_workspace_yaml_names_the_module_and_the_location_loads() -> None:
    """What `dagster dev` does with workspace.yaml, in process."""
    config = yaml.safe_load((ROOT / "workspace.yaml").read_text())
    [entry] = config["load_from"]
    assert entry["python_module"]["module_name"] == "p2panda_assets.definitions"
    [origin] = location_origins_from_yaml_paths([str(ROOT / "workspace.yaml")])
    assert origin.loadable_target_origin.module_name == "p2panda_assets.definitions"
    in_process = InProcessCodeLocationOrigin(origin.loadable_target_origin, origin.location_name)
    with dg.DagsterInstance.ephemeral() as instance:
        location = in_process.create_location(instance)
        [repository] = location.get_repositories().values()
        assert repository.has_job(JOB)
        keys = {node.asset_key.to_user_string() for node in repository.get_asset_node_snaps()}
        assert keys == set(FAMILY)


@pytest.mark.parametrize("config_dir", [ROOT, PACKAGE], ids=["repo-root", "package-template"])
def test_dagster_yaml_keeps_dagster_storage_in_the_products_database(
    config_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both the repository's dagster.yaml and the template `panda` copies into DAGSTER_HOME
    put runs, events and schedules in the PostgreSQL that P2PANDA_DATABASE_URL names."""
    url = "postgresql://panda:secret@db.example:5433/p2panda"
    monkeypatch.setenv(DATABASE_URL_ENV, url)
    ref = InstanceRef.from_dir(str(config_dir))
    storages = (ref.storage_data, ref.run_storage_data, ref.event_storage_data)
    assert {(s.module_name, s.class_name) for s in storages} == {
        ("dagster_postgres", "DagsterPostgresStorage"),
        ("dagster_postgres", "PostgresRunStorage"),
        ("dagster_postgres", "PostgresEventLogStorage"),
    }
    config_type = resolve_to_config_type(DagsterPostgresStorage.config_type())
    processed = process_config(config_type, ref.storage_data.config_dict)
    assert processed.success, processed.errors
    assert pg_url_from_config(processed.value) == url


def test_postgresql_urls_reach_dagster_through_psycopg2() -> None:
    """dagster-postgres' event log fails under psycopg 3, which SQLAlchemy 2.1 picks for
    plain postgresql:// URLs; dagster.yaml passes P2PANDA_DATABASE_URL through as is."""
    engine = sqlalchemy.create_engine("postgresql://panda@db.example/p2panda")
    assert engine.dialect.driver == "psycopg2"


def test_the_package_carries_the_same_dagster_yaml_as_the_repository() -> None:
    """`panda` copies the package's dagster.yaml into DAGSTER_HOME; it must be a real file
    (a symlink is lost by installs of the package alone) equal to the repository's."""
    from pathlib import Path

    import p2panda_assets

    packaged = Path(p2panda_assets.__file__).parent / "dagster.yaml"
    assert not packaged.is_symlink()
    assert packaged.read_text() == (Path(__file__).parents[2] / "dagster.yaml").read_text()


def test_sensors_say_how_often_the_daemon_really_runs_them() -> None:
    """The UI shows a sensor's minimum interval as its frequency; the daemon looks at its
    sensors once a loop, every `MIN_INTERVAL_LOOP_TIME` seconds, which no setting of
    `dagster.yaml` changes (it had "~1 sec"). As the UI reads it: the repository's snapshot."""
    from dagster._daemon.sensor import MIN_INTERVAL_LOOP_TIME

    [origin] = location_origins_from_yaml_paths([str(ROOT / "workspace.yaml")])
    in_process = InProcessCodeLocationOrigin(origin.loadable_target_origin, origin.location_name)
    with dg.DagsterInstance.ephemeral() as instance:
        location = in_process.create_location(instance)
        [repository] = location.get_repositories().values()
        intervals = {s.name: s.min_interval_seconds for s in repository.get_sensors()}
    assert intervals == {s.name: MIN_INTERVAL_LOOP_TIME for s in defs.sensors}
    assert len(intervals) == 3
    for config_dir in (ROOT, PACKAGE, ROOT / "deploy"):
        assert "sensors" not in yaml.safe_load((config_dir / "dagster.yaml").read_text())
