"""Runs the listener submits: built as the sensor daemon builds a sensor's runs (the job
of the code location, its execution plan, the request's partition tags), then submitted
to the instance's run coordinator, so they wait in the same queue as every other run.

The daemon loads user code from the workspace's code server, which the listener cannot
reach (it runs inside the run coordinator, which is not given the workspace). So the
listener loads the product's definitions in its own process (`InProcessCodeLocation`),
under the workspace's location name: a run's location is found by name, by the UI, the
queue and the run launchers (Dagster's default launcher asks that location's code server
to start it), and its code origin (`p2panda_assets.definitions`) is the one every
process of the deployment imports.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

import dagster as dg
from dagster._core.definitions.selector import JobSubsetSelector
from dagster._core.remote_origin import InProcessCodeLocationOrigin
from dagster._core.remote_representation.code_location import InProcessCodeLocation
from dagster._core.storage.tags import RUN_KEY_TAG
from dagster._core.types.loadable_target_origin import LoadableTargetOrigin

from p2panda_assets.defs.partitions import SCHEMAS
from p2panda_assets.defs.sensors.requests import missing_partitions

DEFINITIONS_MODULE = "p2panda_assets.definitions"
JOB = "materialize_schema"  # the sensors' job (`defs.assets.materialize_schema_job`)


class RunSubmitter:
    """The code location, loaded once; `submit` makes a queued run of a request."""

    def __init__(self, instance: dg.DagsterInstance, location_name: str) -> None:
        from p2panda_assets.definitions import defs

        self._instance = instance
        origin = InProcessCodeLocationOrigin(
            LoadableTargetOrigin(
                executable_path=sys.executable,
                module_name=DEFINITIONS_MODULE,
                working_directory=os.getcwd(),
            ),
            location_name=location_name,
        )
        self._location = InProcessCodeLocation(origin, instance)
        [self._repository] = self._location.get_repositories().values()
        self._job_def = defs.resolve_job_def(JOB)

    def submit(self, request: dg.RunRequest, tags: Mapping[str, str]) -> dg.DagsterRun:
        """Create the run of `request` (its partition's tags resolved, as a sensor's are,
        plus `tags`) and submit it: QUEUED, for the daemon's run queue. Its partition is
        added first if the instance lacks it, as the sensors add it in their tick."""
        missing = missing_partitions(self._instance, [request])
        if missing:
            self._instance.add_dynamic_partitions(SCHEMAS, missing)
        resolved = request.with_resolved_tags_and_config(
            target_definition=self._job_def,
            dynamic_partitions_requests=[],
            dynamic_partitions_store=self._instance,
        )
        selection = resolved.asset_selection
        remote_job = self._location.get_job(
            JobSubsetSelector(
                location_name=self._location.name,
                repository_name=self._repository.name,
                job_name=JOB,
                op_selection=None,
                asset_selection=selection,
            )
        )
        plan = self._location.get_execution_plan(
            remote_job, resolved.run_config, None, None, instance=self._instance
        )
        run_tags = {**(remote_job.run_tags or {}), **resolved.tags, **tags}
        if resolved.run_key:
            run_tags[RUN_KEY_TAG] = resolved.run_key
        run = self._instance.create_run(
            job_name=JOB,
            run_id=None,
            run_config=resolved.run_config,
            resolved_op_selection=remote_job.resolved_op_selection,
            step_keys_to_execute=None,
            status=dg.DagsterRunStatus.NOT_STARTED,
            op_selection=None,
            root_run_id=None,
            parent_run_id=None,
            tags=run_tags,
            job_snapshot=remote_job.job_snapshot,
            execution_plan_snapshot=plan.execution_plan_snapshot,
            parent_job_snapshot=remote_job.parent_job_snapshot,
            remote_job_origin=remote_job.get_remote_origin(),
            job_code_origin=remote_job.get_python_origin(),
            asset_selection=frozenset(selection) if selection is not None else None,
            asset_check_selection=None,
            asset_graph=self._repository.asset_graph,
        )
        return self._instance.submit_run(run.run_id, workspace=None)  # type: ignore[arg-type]

    def close(self) -> None:
        self._location.cleanup()
