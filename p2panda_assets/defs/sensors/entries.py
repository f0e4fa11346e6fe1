"""`schema_entries_sensor`: requests a rebuild of the schemas new entries concern (by
`ingest_seq`), only those. What each rebuild covers is `engine.readiness.entries_scope`'s
decision."""

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Self

import dagster as dg
import psycopg

from p2panda_assets.defs.assets import THROUGH_TAG
from p2panda_assets.defs.partitions import partition_keys
from p2panda_assets.defs.resources import PostgresResource
from p2panda_assets.defs.sensors.coverage import entries_covered, prefix_bound
from p2panda_assets.defs.sensors.cursors import EntryCursor
from p2panda_assets.defs.sensors.requests import (
    FAMILY,
    SCOPES,
    batched,
    load_relations,
    pipeline_sensor,
    queued_selections,
    request,
    skip_reason,
    table_holds,
    with_partitions,
)
from p2panda_assets.engine.readiness import Relations, Scope, entries_scope
from p2panda_assets.protocol.message_index import message_index
from p2panda_assets.store.entry_claims import claim_entries, entries_lock
from p2panda_assets.store.feed import (
    FreshLog,
    LogAssignment,
    LogKey,
    built_through,
    feed,
    first_payloads,
    log_assignments,
    registry,
    schema_of_hashes,
    writers,
)

PEEK_ENTRIES = 64  # entries read from the start of a log not yet assigned to a schema


def read_new_entries(
    conn: psycopg.Connection, cursor: EntryCursor, now: float | None = None
) -> tuple[list[FreshLog], EntryCursor]:
    """The logs with entries the cursor has not seen, and the cursor past them."""
    now = time.time() if now is None else now
    active = writers(conn)  # before the snapshot: a writer seen here may commit into it
    found = feed(conn, cursor.seq, cursor.holes, now)
    return found.logs, EntryCursor.past(found, active, now)


@dataclass
class Route:
    """Why a schema is concerned by new entries, and their ingest_seq range."""

    own_log: bool
    first: int
    last: int

    def widen(self, log: FreshLog, own_log: bool) -> Self:
        return type(self)(
            self.own_log or own_log, min(self.first, log.first), max(self.last, log.last)
        )


def route_entries(
    conn: psycopg.Connection, fresh: list[FreshLog], registered: set[str]
) -> dict[str, Route]:
    """The registered schemas new entries concern, without verifying them (the index
    step does that, once). A log is routed to:

    - the schema it is the log of (its id is the schema id): a schema change;
    - the schema the index assigned it to (`p2panda.logs.schema_id`);
    - for a log the index has not assigned (new, or pending for its schema): the schemas
      its first reference names (as indexed) and that the payloads of its first
      `PEEK_ENTRIES` entries name: a log is assigned to the schema its first message
      names, so this is where it will go. The payloads are only read, never trusted: a
      forged one costs one needless rebuild, and its entry is rejected by the index.

    A log that names no registered schema concerns no table: its entries are verified and
    accounted by the next run of any schema.
    """
    routes: dict[str, Route] = {}

    def add(schema_id: str | None, log: FreshLog, own_log: bool = False) -> None:
        if schema_id is not None and schema_id in registered:
            old = routes.get(schema_id)
            routes[schema_id] = (
                Route(own_log, log.first, log.last) if old is None else old.widen(log, own_log)
            )

    unassigned = []
    assigned = log_assignments(conn, [log.key for log in fresh])
    for log in fresh:
        found = assigned.get(log.key)
        if log.schema_id in registered:
            add(log.schema_id, log, own_log=True)
        elif found is not None and found.schema_id is not None:
            add(found.schema_id, log)
        else:
            unassigned.append(log)
    named = _named_schemas(conn, unassigned, assigned)
    for log in unassigned:
        for schema_id in named.get(log.key, ()):
            add(schema_id, log)
    return routes


def _named_schemas(
    conn: psycopg.Connection, logs: list[FreshLog], assigned: Mapping[LogKey, LogAssignment]
) -> dict[LogKey, set[str]]:
    """Per log, the schema ids its indexed first reference and its first payloads name."""
    ids: dict[LogKey, set[str]] = {}
    hashes: dict[LogKey, set[bytes]] = {}
    for log in logs:
        found = assigned.get(log.key)
        ref = None if found is None else found.ref_schema_id
        ref_hash = None if found is None else found.ref_hash
        ids[log.key] = {ref} if ref else set()
        hashes[log.key] = {ref_hash} if ref_hash else set()
    for key, payload in first_payloads(conn, [log.key for log in logs], PEEK_ENTRIES):
        _kind, schema_id, _version, schema_hash, _instance = message_index(payload)
        if schema_id:
            ids[key].add(schema_id)
        if schema_hash:
            hashes[key].add(schema_hash)
    owners = schema_of_hashes(conn, {h for found in hashes.values() for h in found})
    for key, found_hashes in hashes.items():
        ids[key] |= {owners[h] for h in found_hashes if h in owners}
    return ids


def entries_requests(
    rel: Relations,
    routes: Mapping[str, Route],
    queued: Mapping[str, frozenset[dg.AssetKey]] | None = None,
    keys: Mapping[str, str] | None = None,
) -> tuple[list[dg.RunRequest], list[str]]:
    """The rebuild each concerned schema gets (run key `entries-<schema>-<first>-<last>`,
    the ingest_seq range of its new entries, disjoint from every other tick's), as
    `entries_scope` decides; nothing where a run still in the queue (`queued`) builds
    those assets already: it reads the new entries when it starts. `keys`: the
    partition key of each schema id (`defs.partitions.partition_keys`; none: bare ids)."""
    requests, notes = [], []
    for sid in rel.ordered(routes):
        route = routes[sid]
        scope = entries_scope(rel, sid, route.own_log)
        if scope is Scope.NONE:
            notes.append(f"{sid}: new entries wait ({rel.why_pending(sid)})")
            continue
        key = (keys or {}).get(sid, sid)
        wanted = request(key, f"entries-{sid}-{route.first}-{route.last}", SCOPES[scope])
        if scope is Scope.UP_TO_PLAN:
            notes.append(f"{sid}: table waits ({rel.why_pending(sid)})")
        if set(wanted.asset_selection or FAMILY) <= (queued or {}).get(sid, frozenset()):
            notes.append(f"{sid}: a queued run will read its new entries")
            continue
        requests.append(wanted)
    return requests, notes


def entries_tick(
    conn: psycopg.Connection,
    cursor: EntryCursor,
    now: float | None = None,
    queued: Mapping[str, frozenset[dg.AssetKey]] | None = None,
    covered: Mapping[str, int] | None = None,
) -> dg.SensorResult:
    """`covered`: per schema, the entries a run that left the queue reads already
    (`coverage.entries_covered`)."""
    fresh, moved = read_new_entries(conn, cursor, now)
    if not fresh:
        return dg.SensorResult(skip_reason="no new entries", cursor=moved.dumps())
    registered = set(registry(conn))
    routes = route_entries(conn, fresh, registered)
    if not routes:
        return dg.SensorResult(
            skip_reason=f"{len(fresh)} logs with new entries, none of a registered schema",
            cursor=moved.dumps(),
        )
    routes, built = unbuilt_routes(routes, built_through(conn, list(routes)))
    routes, started = unbuilt_routes(routes, covered or {})
    requests, notes = entries_requests(load_relations(conn), routes, queued, partition_keys(conn))
    notes += [f"{sid}: its table was built from these entries already" for sid in built]
    notes += [f"{sid}: a run submitted after these entries reads them" for sid in started]
    return dg.SensorResult(
        run_requests=reading_through(batched(requests), prefix_bound(moved.seq, moved.holes)),
        skip_reason=None if requests else skip_reason(notes, "nothing to rebuild"),
        cursor=moved.dumps(),
    )


def reading_through(requests: list[dg.RunRequest], bound: int) -> list[dg.RunRequest]:
    """The requests tagged `THROUGH_TAG=bound`: every entry up to `bound` had committed
    when they were decided, so their runs read them (`coverage`), as the listener's do."""
    return [r.with_replaced_attrs(tags={**r.tags, THROUGH_TAG: str(bound)}) for r in requests]


def unbuilt_routes(
    routes: Mapping[str, Route], built: Mapping[str, int]
) -> tuple[dict[str, Route], list[str]]:
    """The routes whose new entries a schema's table may not hold yet, and the schemas
    left out: those whose table was built after every one of their new entries was
    verified (`table_holds`): a daemon started after `panda materialize`, whose first
    tick reads the whole store, or entries a run launched for another reason picked up
    already."""
    kept = {sid: r for sid, r in routes.items() if not table_holds(built, sid, r.last)}
    return kept, [sid for sid in routes if sid not in kept]


@pipeline_sensor
def schema_entries_sensor(
    context: dg.SensorEvaluationContext, postgres: PostgresResource
) -> dg.SensorResult:
    """Rebuilds the schemas that new entries (by ingest_seq) concern, only those, unless
    a run of theirs (queued, started or done) reads the entries anyway. Decided under the
    entries lock, which the live listener takes too, and what it read is left there for
    the listener (`store.entry_claims`): an entry is the run of one of them."""
    with postgres.connect() as conn, entries_lock(conn):
        queued = queued_selections(context.instance)
        covered = entries_covered(context.instance)
        result = entries_tick(
            conn, EntryCursor.parse(context.cursor), queued=queued, covered=covered
        )
        claim_entries(conn, result.cursor or "")
    return with_partitions(context.instance, result)
