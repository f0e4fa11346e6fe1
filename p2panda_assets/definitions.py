"""The code location (`workspace.yaml`): everything Dagster loads for p2panda-assets."""

from __future__ import annotations

import dagster as dg

from p2panda_assets.defs.assets import family, materialize_schema_job
from p2panda_assets.defs.resources import default_resources

defs = dg.Definitions(assets=family, jobs=[materialize_schema_job], resources=default_resources())
