"""Sensor skip reasons reach the UI (issue 56 item 6): each sensor evaluated by the
sensor daemon's own iteration (`execute_sensor_iteration`, the code location loaded in
process) against a real Dagster instance and the real test database; the ticks read
back from the instance are what the UI's tick list shows."""

from __future__ import annotations

import logging
import os
import sys

import dagster as dg
import psycopg
import pytest
from dagster._core.remote_origin import InProcessCodeLocationOrigin
from dagster._core.scheduler.instigation import InstigatorTick, TickStatus
from dagster._core.test_utils import create_test_daemon_workspace_context
from dagster._core.types.loadable_target_origin import LoadableTargetOrigin
from dagster._core.workspace.load_target import InProcessWorkspaceLoadTarget
from dagster._daemon.sensor import execute_sensor_iteration

from tests.automation.corpora import relation_graph
from tests.automation.store import publish

pytestmark = pytest.mark.postgres


def daemon_ticks(instance: dg.DagsterInstance) -> dict[str, InstigatorTick]:
    """One iteration of the sensor daemon over the product's code location; the latest
    tick of each sensor, as the instance stores it."""
    origin = InProcessCodeLocationOrigin(
        LoadableTargetOrigin(
            executable_path=sys.executable,
            module_name="p2panda_assets.definitions",
            working_directory=os.getcwd(),
        ),
        location_name="p2panda_assets",
    )
    target = InProcessWorkspaceLoadTarget(origin)
    with create_test_daemon_workspace_context(target, instance) as workspace:
        list(execute_sensor_iteration(workspace, logging.getLogger("test"), None, None))
    latest = {}
    for state in instance.all_instigator_state():
        ticks = instance.get_ticks(state.instigator_origin_id, state.selector_id, limit=1)
        if ticks:
            latest[state.instigator_name] = ticks[0]
    return latest


def test_a_tick_with_nothing_to_do_is_skipped_with_its_reason(
    conn: psycopg.Connection,
) -> None:
    publish(conn, relation_graph().fresh())  # entries, of no registered schema
    with dg.instance_for_test() as instance:
        ticks = daemon_ticks(instance)
    reasons = {name: (tick.status, tick.skip_reason) for name, tick in ticks.items()}
    skipped = TickStatus.SKIPPED
    assert reasons == {
        "schema_entries_sensor": (skipped, "8 logs with new entries, none of a registered schema"),
        "schema_registration_sensor": (skipped, "no schema to build"),
        "schema_revert_sensor": (skipped, "no new schema-revert entries"),
    }
    assert all(tick.run_ids == [] for tick in ticks.values())
