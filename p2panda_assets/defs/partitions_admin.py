"""Taking schemas out of the asset family: the partitions of the dynamic partitions
definition `schemas` on the Dagster instance under `DAGSTER_HOME`, which the command line
reaches as `orchestration.add_partition` does. Their runs and materializations stay in
Dagster's history; a schema registered again gets its partition back."""

from __future__ import annotations

import dagster as dg

from p2panda_assets.defs.orchestration import prepare_environment
from p2panda_assets.defs.partitions import SCHEMAS, schema_id_of


def remove_partition(schema_id: str) -> bool:
    """Remove the schema's partition; False if it had none."""
    prepare_environment()
    with dg.DagsterInstance.get() as instance:
        return bool(remove_partitions(instance, [schema_id]))


def remove_partitions(instance: dg.DagsterInstance, schema_ids: list[str]) -> list[str]:
    """Remove every partition of `schema_ids`, whatever its key (`<name>.<id>`, a bare
    id, a key from before a rename); the keys that were there."""
    wanted = set(schema_ids)
    present = [k for k in instance.get_dynamic_partitions(SCHEMAS) if schema_id_of(k) in wanted]
    for key in present:
        instance.delete_dynamic_partition(SCHEMAS, key)
    return present
