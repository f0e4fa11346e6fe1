"""Each registered schema is one dynamic partition of the asset family, its key
`<name>.<schema id>` (the registered name first, so that the UI, which cuts long keys in
the middle, keeps it readable), or the bare schema id for a schema registered without a
name. The schema id stays the identity everywhere else: the registry, the run tags the
product writes, the command line. `partition_key` makes a key and `schema_id_of` reads
one back; nothing else spells or splits a key.

An instance whose partitions predate these keys (bare ids) is brought up to date by
`partition_changes`: the registration sensor and `panda materialize` add the current key
of every registered schema and remove the keys no registered schema has any more, except
those a run or a backfill not yet finished still works on.

A key that changes (a schema renamed, `panda register --name`) takes its schema's builds
along (`carried_materializations`): the latest materialization of each asset under the
earlier key is reported again under the new one, so that the UI never shows a renamed
schema Missing while its table is there, and `panda materialize` finds it up to date."""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping

import dagster as dg
import psycopg
from dagster._core.event_api import EventLogRecord
from dagster._core.execution.backfill import BulkActionsFilter, BulkActionStatus

from p2panda_assets.store.registry import registered_schemas

SCHEMAS = "schemas"
schemas = dg.DynamicPartitionsDefinition(name=SCHEMAS)

# The metadata of a partition's built table naming the index it was built from
# (`IndexResult.fingerprint`): `panda materialize` launches no run while every partition
# it would run shows the current one (`orchestration.up_to_date`). Here, not with the
# assets: the command reads it without importing Spark.
BUILT_FROM = "built_from_index"

PARTITION_TAG = "dagster/partition"  # a run's partition key, as Dagster tags it
# A registered name is 1..64 printable ASCII characters. In a key, those the UI's partition
# selection syntax gives a meaning (`,`, `[`, `]`, `*`, quotes, spaces) or that Dagster
# refuses (`|` of multi-partitions) become `_`; a run of dots becomes one, as `...` is
# the UI's range and Dagster refuses it in a key. The name is only shown: the id after
# the key's last dot (an id has none) is what a key means.
UNSAFE_IN_KEY = re.compile(r"[^A-Za-z0-9_:/@.-]")
DOTS = re.compile(r"\.{2,}")
FAMILY = [  # the assets of a schema's partition, upstream first
    dg.AssetKey(name)
    for name in ("raw_entries", "decoded_messages", "migration_plan", "materialized_table")
]
SCHEMA_NAME = "schema_name"  # the metadata of every materialization naming its schema
CARRIED_FROM = "carried_from"  # of a carried materialization: the key it was made under
UNFINISHED_RUNS = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
    dg.DagsterRunStatus.CANCELING,
]
UNFINISHED_BACKFILLS = [
    BulkActionStatus.REQUESTED,
    BulkActionStatus.CANCELING,
    BulkActionStatus.FAILING,
]


def partition_key(name: str | None, schema_id: str) -> str:
    """The partition key of a schema: `<name>.<schema id>`, the bare id without a name."""
    if not name:
        return schema_id
    shown = DOTS.sub(".", UNSAFE_IN_KEY.sub("_", name))
    return f"{shown}.{schema_id}"


def schema_id_of(key: str) -> str:
    """The schema id a partition key names (`partition_key` read back): what follows its
    last dot, or the whole key (a bare id). Not checked: a key added by hand in the UI
    may name no schema at all (`checked_schema_id` says so where it matters)."""
    return key.rpartition(".")[2]


def partition_keys(conn: psycopg.Connection) -> dict[str, str]:
    """Every registered schema's partition key, by schema id."""
    return {
        row.schema_id: partition_key(row.registered_name, row.schema_id)
        for row in registered_schemas(conn)
    }


def schema_names(conn: psycopg.Connection) -> dict[str, str | None]:
    """Every registered schema's name (registered, else its own), by schema id."""
    return {row.schema_id: row.shown_name for row in registered_schemas(conn)}


def partition_changes(
    existing: Iterable[str], wanted: Iterable[str], in_use: Iterable[str] = ()
) -> tuple[list[str], list[str]]:
    """(keys to add, keys to remove) to bring the partitions `existing` to `wanted`; a key
    `in_use` (a run or backfill not finished works on it) is not removed yet: Dagster
    fails a backfill whose partitions went away under it."""
    have, want = set(existing), set(wanted)
    return sorted(want - have), sorted(have - want - set(in_use))


def keys_in_use(instance: dg.DagsterInstance) -> set[str]:
    """The partition keys of runs and backfills not finished yet."""
    runs = instance.get_runs(filters=dg.RunsFilter(statuses=UNFINISHED_RUNS), limit=1000)
    used = {run.tags[PARTITION_TAG] for run in runs if PARTITION_TAG in run.tags}
    backfills = instance.get_backfills(filters=BulkActionsFilter(statuses=UNFINISHED_BACKFILLS))
    for backfill in backfills:
        used.update(backfill.partition_names or ())
        data = backfill.asset_backfill_data if backfill.is_asset_backfill else None
        for subset in data.target_subset.partitions_subsets_by_asset_key.values() if data else ():
            used.update(subset.get_partition_keys())
    return used


def sync_partitions(
    instance: dg.DagsterInstance,
    wanted: Collection[str],
    of_schema: str | None = None,
    names: Mapping[str, str | None] | None = None,
) -> list[str]:
    """Make the partitions `wanted` on `instance` at once (`partition_changes`), as the
    registration sensor does at its ticks; with `of_schema`, only that schema's keys are
    looked at (a registration). A key added for a schema that had another takes its
    builds along (`carry_materializations`; `names`: the schemas' names now, by id).
    The keys removed."""
    existing = instance.get_dynamic_partitions(SCHEMAS)
    if of_schema is not None:
        existing = [key for key in existing if schema_id_of(key) == of_schema]
    add, remove = partition_changes(existing, wanted)
    if remove:
        add, remove = partition_changes(existing, wanted, keys_in_use(instance))
    if add:
        instance.add_dynamic_partitions(SCHEMAS, add)
    for key in add:
        schema_id = schema_id_of(key)
        earlier = [k for k in existing if schema_id_of(k) == schema_id]
        carry_materializations(instance, earlier, key, (names or {}).get(schema_id))
    for key in remove:
        instance.delete_dynamic_partition(SCHEMAS, key)
    return remove


def carry_materializations(
    instance: dg.DagsterInstance, earlier: Collection[str], key: str, name: str | None
) -> None:
    """Report `carried_materializations` on `instance` (as a sensor returns them)."""
    for event in carried_materializations(instance, earlier, key, name):
        instance.report_runless_asset_event(event)


def carried_materializations(
    instance: dg.DagsterInstance, earlier: Collection[str], key: str, name: str | None
) -> list[dg.AssetMaterialization]:
    """For each asset of the family, its latest materialization under the `earlier` keys
    of a schema whose key is `key` now, if it is newer than the latest under `key`: the
    same metadata, `schema_name` the schema's `name` now, `carried_from` the key it was
    made under. A renamed schema's table is the one its last run built: without these,
    its new partition shows Missing until something new comes for it. None a second
    time (what was carried is the newest then)."""
    earlier = [k for k in earlier if k != key]
    if not earlier:
        return []
    carried = []
    for asset in FAMILY:
        before = _latest_materialization(instance, asset, earlier)
        now = _latest_materialization(instance, asset, [key])
        if before is not None and (now is None or now.storage_id < before.storage_id):
            carried.append(_carried(before, key, name))
    return carried


def _latest_materialization(
    instance: dg.DagsterInstance, asset: dg.AssetKey, keys: Collection[str]
) -> EventLogRecord | None:
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=asset, asset_partitions=sorted(keys)), limit=1
    ).records
    return records[0] if records else None


def _carried(record: EventLogRecord, key: str, name: str | None) -> dg.AssetMaterialization:
    """The materialization `record` holds, again under the partition `key`."""
    made = record.asset_materialization
    assert made is not None  # a materialization's record
    metadata = dict(made.metadata)
    if name is not None:
        metadata[SCHEMA_NAME] = dg.MetadataValue.text(name)
    metadata[CARRIED_FROM] = dg.MetadataValue.text(made.partition or "")
    return dg.AssetMaterialization(asset_key=made.asset_key, partition=key, metadata=metadata)
