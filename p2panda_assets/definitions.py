"""The code location (`workspace.yaml`): everything Dagster loads for p2panda-assets."""

from __future__ import annotations

import dagster as dg

from p2panda_assets.defs.as_of import materialize_as_of_version
from p2panda_assets.defs.assets import family, materialize_schema_job
from p2panda_assets.defs.checks import checks
from p2panda_assets.defs.resources import default_resources
from p2panda_assets.defs.sensors import sensors

defs = dg.Definitions(
    assets=family,
    asset_checks=checks,
    jobs=[materialize_schema_job, materialize_as_of_version],
    sensors=sensors,
    resources=default_resources(),
    # Also for the jobs Dagster builds itself (a backfill launched from the UI): every
    # step in one process shares one Spark session instead of starting a JVM per step.
    executor=dg.in_process_executor,
)
