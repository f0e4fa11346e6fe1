"""`schema_revert_sensor`: fans a verified schema-revert out to the schemas that relate to
the reverted one. Which schemas are rebuilt is `engine.readiness.revert_fan_out`'s
decision."""

from collections.abc import Mapping
from dataclasses import replace

import dagster as dg
import psycopg

from p2panda_assets.defs.partitions import partition_keys
from p2panda_assets.defs.resources import PostgresResource
from p2panda_assets.defs.sensors.cursors import RevertCursor
from p2panda_assets.defs.sensors.requests import (
    PLAN_AND_TABLE,
    batched,
    busy_partitions,
    load_relations,
    pipeline_sensor,
    queued_tables,
    request,
    requested_schema,
    skip_reason,
    table_holds,
    with_partitions,
)
from p2panda_assets.engine.readiness import Relations, revert_fan_out
from p2panda_assets.store.feed import built_through, verified_reverts


def revert_requests(
    rel: Relations, schema_id: str, seq: int, keys: Mapping[str, str] | None = None
) -> tuple[list[dg.RunRequest], list[str]]:
    """`migration_plan` and `materialized_table` of the reverted schema and of every
    registered schema whose relations reach it, upstream first; a schema that is not
    ready (cycle, unregistered or unmaterialized upstream) is left out. `keys`: the
    partition key of each schema id (`defs.partitions.partition_keys`; none: bare ids)."""
    rebuilt, pending = revert_fan_out(rel, schema_id)
    requests = [
        request(
            (keys or {}).get(target, target), f"revert-{schema_id}-{seq}-{target}", PLAN_AND_TABLE
        )
        for target in rebuilt
    ]
    notes = [f"{target} waits: {rel.why_pending(target)}" for target in pending]
    return requests, notes


def unbuilt_requests(
    requests: list[dg.RunRequest], built: Mapping[str, int], since: int
) -> tuple[list[dg.RunRequest], list[str]]:
    """The requests whose table may not reflect the revert yet, and the schemas left out:
    those whose table was built after the revert entry (ingest_seq `since`) was verified
    (`table_holds`): a daemon started after `panda demo`, whose first tick finds every
    revert new."""
    kept = [r for r in requests if not table_holds(built, requested_schema(r), since)]
    return kept, [requested_schema(r) for r in requests if r not in kept]


def unqueued_requests(
    requests: list[dg.RunRequest], queued: set[str]
) -> tuple[list[dg.RunRequest], list[str]]:
    """The requests no queued run does already, and the schemas left out: those whose
    table a queued run builds (`queued_tables`). It starts after the revert was verified,
    so it builds the table at the reverted lens: one run for the change, not two (the
    registration sensor's rebuild of a cascade dependent, the listener's of the schema)."""
    kept = [r for r in requests if requested_schema(r) not in queued]
    return kept, [requested_schema(r) for r in requests if r not in kept]


def revert_tick(
    conn: psycopg.Connection, instance: dg.DagsterInstance, cursor: RevertCursor
) -> dg.SensorResult:
    found = verified_reverts(conn)
    new = {s: seqs for s, seqs in found.items() if set(seqs) - set(cursor.handled.get(s, ()))}
    if not new:
        return dg.SensorResult(skip_reason="no new schema-revert entries", cursor=cursor.dumps())
    busy = busy_partitions(instance)
    queued = queued_tables(instance)
    rel = load_relations(conn)
    keys = partition_keys(conn)
    handled = {s: seqs for s, seqs in cursor.handled.items() if s in found}
    requests: list[dg.RunRequest] = []
    notes: list[str] = []
    for sid in rel.ordered(new):
        latest = max(set(new[sid]) - set(cursor.handled.get(sid, ())))
        more, why = revert_requests(rel, sid, latest, keys)
        writing = sorted(busy & {sid, *map(requested_schema, more)})
        if writing:  # a run in progress may or may not have read the revert: wait for it
            whose = "its run" if sid in busy else f"the run of {writing[0]}"
            notes.append(f"revert of {sid} waits for {whose} in progress")
            continue
        built = built_through(conn, [requested_schema(r) for r in more])
        more, done = unbuilt_requests(more, built, found[sid][latest])
        more, coming = unqueued_requests(more, queued)
        requests += more
        notes += why + [
            f"{target}: its table was built after the revert of {sid}" for target in done
        ]
        notes += [f"{target}: a queued run builds its table after the revert" for target in coming]
        handled[sid] = sorted(found[sid])
    return dg.SensorResult(
        run_requests=batched(requests),
        skip_reason=None if requests else skip_reason(notes, "nothing to rebuild"),
        cursor=replace(cursor, handled=handled).dumps(),
    )


@pipeline_sensor
def schema_revert_sensor(
    context: dg.SensorEvaluationContext, postgres: PostgresResource
) -> dg.SensorResult:
    """On a verified schema-revert entry, requests `migration_plan` and
    `materialized_table` for the reverted schema and the schemas whose relations reach it.

    No `raw_entries`: a revert is found in `message_index`, so the index has verified it
    already, and the plan (folded from the store) reflects it. The run that indexed it was
    the entries sensor's rebuild of the schema; a revert waits while that run (or one
    of a schema it rebuilds) is still writing, and leaves out the schemas whose table is
    built after it already, or by a run still queued: one run for each schema it changes."""
    with postgres.connect() as conn:
        result = revert_tick(conn, context.instance, RevertCursor.parse(context.cursor))
    return with_partitions(context.instance, result)
