"""Taking schemas out of the asset family: the partitions of the dynamic partitions
definition `schemas` on the Dagster instance under `DAGSTER_HOME`, which the command line
reaches as `orchestration.add_partition` does. Their runs and materializations stay in
Dagster's history; a schema registered again gets its partition back."""

from __future__ import annotations

import dagster as dg

from p2panda_assets.orchestration import SCHEMAS, prepare_environment


def remove_partition(schema_id: str) -> bool:
    """Remove the schema's partition; False if it had none."""
    prepare_environment()
    with dg.DagsterInstance.get() as instance:
        return bool(remove_partitions(instance, [schema_id]))


def remove_partitions(instance: dg.DagsterInstance, schema_ids: list[str]) -> list[str]:
    """Remove the partitions of `schema_ids`; those that were there."""
    present = [s for s in schema_ids if instance.has_dynamic_partition(SCHEMAS, s)]
    for schema_id in present:
        instance.delete_dynamic_partition(SCHEMAS, schema_id)
    return present
