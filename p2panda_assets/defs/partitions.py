"""Each registered schema is one dynamic partition (key = schema id) of the asset family."""

from __future__ import annotations

import dagster as dg

schemas = dg.DynamicPartitionsDefinition(name="schemas")

# The metadata of a partition's built table naming the index it was built from
# (`IndexResult.fingerprint`): `panda materialize` launches no run while every partition
# it would run shows the current one (`orchestration.up_to_date`). Here, not with the
# assets: the command reads it without importing Spark.
BUILT_FROM = "built_from_index"
