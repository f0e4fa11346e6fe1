"""The resident worker keeps one storage connection open between statements (Dagster's
PostgreSQL storages open one per statement otherwise), and a run read after that
connection was lost (the server restarted) still reads."""

from __future__ import annotations

from collections.abc import Iterator

import dagster as dg
import psycopg
import pytest

from p2panda_assets.resident.worker import keep_storage_connections, read_run
from tests.resident import jobs

pytestmark = pytest.mark.postgres

OTHERS = "FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"


def storage_connections(url: str) -> int:
    """Connections to the database other than this one."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(f"SELECT count(*) {OTHERS}").fetchone()
        assert row is not None
        return int(row[0])


def terminate_storage_connections(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        return len(conn.execute(f"SELECT pg_terminate_backend(pid) {OTHERS}").fetchall())


@pytest.fixture
def instance(session_database: str) -> Iterator[dg.DagsterInstance]:
    overrides = {"storage": {"postgres": {"postgres_url": session_database}}}
    with dg.instance_for_test(overrides=overrides) as instance:
        yield instance


def test_the_worker_keeps_a_storage_connection_and_reads_on_after_losing_it(
    instance: dg.DagsterInstance, session_database: str
) -> None:
    run = instance.create_run_for_job(job_def=jobs.which_process)
    assert read_run(instance, run.run_id) is not None
    assert storage_connections(session_database) == 0  # Dagster's default: none kept

    keep_storage_connections(instance)
    assert read_run(instance, run.run_id) is not None
    assert storage_connections(session_database) == 1

    assert terminate_storage_connections(session_database) == 1
    found = read_run(instance, run.run_id)
    assert found is not None and found.run_id == run.run_id
    assert storage_connections(session_database) == 1
