"""Sensors: the deployment's automation, idempotent across ticks.

- `schema_registration_sensor` adds the partition of every registered schema and requests
  a schema's family when it is registered, and again when it stops waiting for its relations
  (or when an upstream it cascades from was rebuilt after it);
- `schema_entries_sensor` requests a rebuild of the schemas new entries concern;
- `schema_revert_sensor` fans a verified schema-revert out to the schemas that relate to the
  reverted one.

Relations are ours to order (a partition cannot depend on another partition of the same
asset): a schema's table is requested only when every schema it relates to is registered
and materialized (`Relations.ready`); a schema in a relation cycle is reported and never
requested. Requests of one tick are listed upstream first and tagged `QUEUE_TAG`, so a run
queue that limits that tag to one run executes them in relation order.

Every sensor reads the store through `PostgresResource` and the relation graph from the
catalog as of the last index step (`stored_catalog`).
"""

import hashlib
import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from decimal import Decimal
from functools import cached_property
from typing import Self

import dagster as dg
import psycopg

from p2panda_assets.defs.assets import BATCH_TAG, QUEUE_TAG, materialize_schema_job
from p2panda_assets.defs.partitions import schemas
from p2panda_assets.defs.resources import PostgresResource
from p2panda_assets.engine.corpus import Catalog
from p2panda_assets.engine.relations import BuildOrder, relation_target
from p2panda_assets.errors import Reason
from p2panda_assets.protocol.message_index import message_index
from p2panda_assets.protocol.messages import format_schema_id
from p2panda_assets.store.catalog import stored_catalog

# The daemon looks at its sensors every 5 s (dagster._daemon.sensor.MIN_INTERVAL_LOOP_TIME,
# not configurable). A minimum interval of 5 s would skip every loop that comes a moment
# early, so 10 s between ticks; 1 s lets every loop tick. The latency goal is 10 s.
MINIMUM_INTERVAL_SECONDS = 1
FAMILY = [
    dg.AssetKey(name)
    for name in ("raw_entries", "decoded_messages", "migration_plan", "materialized_table")
]
UP_TO_PLAN = FAMILY[:3]  # verify and index, decode, fold: everything but the table
PLAN_AND_TABLE = FAMILY[2:]
PARTITION_TAG = "dagster/partition"
BUILT = ("materialized", "dropped")  # registry statuses of a schema whose table step ran
QUEUED = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED]  # not begun
UNFINISHED = [*QUEUED, dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED]
HOLE_TTL_SECONDS = 600.0  # an ingest transaction open longer than this is not waited for
MAX_HOLES = 10_000
PEEK_ENTRIES = 64  # entries read from the start of a log not yet assigned to a schema


# --- what the store says about registered schemas and their relations --------------------


@dataclass(frozen=True, slots=True)
class Registered:
    status: str  # registered | materialized | waiting | dropped
    registered_at: datetime
    materialized_at: datetime | None


def registry(conn: psycopg.Connection) -> dict[str, Registered]:
    rows = conn.execute(
        "SELECT schema_id, status, registered_at, materialized_at FROM p2panda.schemas"
        " ORDER BY schema_id"
    ).fetchall()
    return {sid: Registered(status, at, built) for sid, status, at, built in rows}


@dataclass(frozen=True)
class Relations:
    """The relation graph of the registered schemas, with what the registry says of each."""

    catalog: Catalog
    order: BuildOrder
    registry: dict[str, Registered]

    @classmethod
    def load(cls, conn: psycopg.Connection) -> Self:
        catalog = stored_catalog(conn)
        return cls(catalog, catalog.order(), registry(conn))

    def upstream(self, schema_id: str) -> tuple[str, ...]:
        """The other schemas `schema_id` relates to (a relation to itself waits for nothing)."""
        return tuple(u for u in self.order.upstream.get(schema_id, ()) if u != schema_id)

    def indexed(self, schema_id: str) -> bool:
        return schema_id in self.catalog.histories

    @cached_property
    def buildable(self) -> frozenset[str]:
        return frozenset(self.order.order)

    def ready(self, schema_id: str, pending: Iterable[str] = ()) -> bool:
        """Buildable, and every upstream schema materialized (or requested before it in
        the same tick, `pending`)."""
        if schema_id not in self.buildable:
            return False
        before = set(pending)
        return all(u in before or self._materialized(u) for u in self.upstream(schema_id))

    def _materialized(self, schema_id: str) -> bool:
        """Its last run built it (a dropped schema was built too: it has no fields left)."""
        state = self.registry.get(schema_id)
        return state is not None and state.status in BUILT

    def why_waiting(self, schema_id: str) -> str:
        if not self.indexed(schema_id):
            return "its schema log is not indexed yet"
        if schema_id not in self.buildable:
            why = self.catalog.not_built(schema_id, self.order)
            return f"{why.reason}: {why.message}"
        late = [u for u in self.upstream(schema_id) if not self._materialized(u)]
        return f"upstream {', '.join(late)} not materialized yet"

    def cycles(self) -> dict[str, str]:
        """Registered schemas in a relation cycle, with the cycle."""
        return {
            sid: why.message
            for sid, why in self.order.waiting.items()
            if why.reason == Reason.RELATION_CYCLE and sid in self.registry
        }

    def dependents(self, schema_id: str) -> list[str]:
        """Registered schemas whose relations reach `schema_id`, transitively; build order."""
        below: dict[str, set[str]] = {}
        for sid in self.order.upstream:
            for up in self.upstream(sid):
                below.setdefault(up, set()).add(sid)
        found: set[str] = set()
        todo = [schema_id]
        while todo:
            for child in below.get(todo.pop(), ()):
                if child not in found and child != schema_id:
                    found.add(child)
                    todo.append(child)
        return self.ordered(found)

    def cascade_upstream(self, schema_id: str) -> set[str]:
        """Schemas whose deletes remove rows of `schema_id` (its cascade relations)."""
        history = self.catalog.histories.get(schema_id)
        if history is None:
            return set()
        targets = {
            relation_target(spec.relation, self.catalog.hash_index)
            for spec in history.lens.values()
            if spec.relation is not None and spec.cascade
        }
        return {t for t in targets if t is not None and t != schema_id}

    def ordered(self, schema_ids: Iterable[str]) -> list[str]:
        """Upstream first: the build order, then the schemas outside it by id."""
        position = {sid: i for i, sid in enumerate(self.order.order)}
        return sorted(schema_ids, key=lambda s: (position.get(s, len(position)), s))

    def version(self, schema_id: str) -> int:
        history = self.catalog.histories.get(schema_id)
        latest = None if history is None else history.latest
        return 0 if latest is None else latest.seq


def busy_partitions(instance: dg.DagsterInstance) -> set[str]:
    """Schemas with a run queued or in progress: what they will write is not known yet."""
    runs = instance.get_runs(filters=dg.RunsFilter(statuses=UNFINISHED), limit=1000)
    return {run.tags[PARTITION_TAG] for run in runs if PARTITION_TAG in run.tags}


def queued_selections(instance: dg.DagsterInstance) -> dict[str, frozenset[dg.AssetKey]]:
    """Per schema, the assets its runs still in the queue will build. A queued run indexes
    the store when it starts, so it reads every entry ingested before that."""
    runs = instance.get_runs(filters=dg.RunsFilter(statuses=QUEUED), limit=1000)
    selections: dict[str, frozenset[dg.AssetKey]] = {}
    for run in runs:
        if PARTITION_TAG in run.tags:
            sid = run.tags[PARTITION_TAG]
            selection = frozenset(run.asset_selection or FAMILY)
            selections[sid] = selections.get(sid, frozenset()) | selection
    return selections


def request(schema_id: str, run_key: str, assets: list[dg.AssetKey] | None = None) -> dg.RunRequest:
    """A run of the schema's family (or of `assets` of it); checks of those assets follow."""
    return dg.RunRequest(
        run_key=run_key,
        partition_key=schema_id,
        asset_selection=assets,
        tags=QUEUE_TAG,
    )


def batched(requests: list[dg.RunRequest]) -> list[dg.RunRequest]:
    """The requests of one tick, each naming all of them as its batch (`BATCH_TAG`): the
    first to run builds them all in one Spark job, the others report their tables."""
    table = FAMILY[-1]
    keys = [
        r.partition_key
        for r in requests
        if r.partition_key and (r.asset_selection is None or table in r.asset_selection)
    ]
    if len(keys) < 2:
        return requests
    batch = {BATCH_TAG: ",".join(dict.fromkeys(keys))}
    return [
        dg.RunRequest(
            run_key=r.run_key,
            partition_key=r.partition_key,
            asset_selection=r.asset_selection,
            tags={**r.tags, **batch},
        )
        for r in requests
    ]


def _stamp(moment: datetime | None) -> str:
    return "none" if moment is None else str(int(moment.timestamp() * 1_000_000))


def _loads(cursor: str | None) -> dict:
    return json.loads(cursor) if cursor else {}


def _skip(lines: list[str], default: str) -> str:
    text = "; ".join(lines) or default
    return text if len(text) <= 2000 else text[:1997] + "..."


# --- registration and relation waiting -----------------------------------------------------


@dataclass
class RegistrationCursor:
    issued: dict[str, str] = field(default_factory=dict)  # schema -> last run key requested
    waiting: list[str] = field(default_factory=list)  # schemas not ready at the last tick
    cycles: list[str] = field(default_factory=list)  # cycles reported already
    state: str = ""  # fingerprint of everything a decision depends on

    @classmethod
    def parse(cls, text: str | None) -> Self:
        return cls(**_loads(text))

    def dumps(self) -> str:
        fields = {"issued": self.issued, "waiting": self.waiting, "cycles": self.cycles}
        return json.dumps({**fields, "state": self.state}, sort_keys=True)


def build_key(rel: Relations, schema_id: str, was_waiting: bool) -> str | None:
    """The run key of the build `schema_id` needs now, or None.

    - registered and never built: once its relations are ready (or while its schema log is
      unknown to the index, which only a run can change);
    - waiting, and now ready;
    - materialized, and an upstream was materialized after it: one it cascades from (its
      deletes remove rows here), or any, if it was waiting at the last tick (entries that
      arrived while it waited are not in its table yet).
    The key names what the build answers to (the upstream materializations), so a later
    change asks again and the same state never does.
    """
    state = rel.registry[schema_id]
    if state.status == "registered":
        if rel.indexed(schema_id) and not rel.ready(schema_id):
            return None
        return f"register-{schema_id}-{_stamp(state.registered_at)}"
    if not rel.ready(schema_id):
        return None
    if state.status == "materialized":
        watched = rel.upstream(schema_id) if was_waiting else rel.cascade_upstream(schema_id)
        newer = [u for u in watched if _after(rel.registry[u], state.materialized_at)]
        if not newer:
            return None
    elif state.status != "waiting":
        return None
    ups = ",".join(
        f"{u}@{_stamp(rel.registry[u].materialized_at)}" for u in rel.upstream(schema_id)
    )
    digest = hashlib.sha1(ups.encode()).hexdigest()[:12]
    return f"relations-{schema_id}-v{rel.version(schema_id)}-{digest}"


def _after(upstream: Registered, built: datetime | None) -> bool:
    at = upstream.materialized_at
    return at is not None and (built is None or at > built)


STATE = """
SELECT coalesce((SELECT fingerprint FROM p2panda.index_state), '') || '|' || coalesce(
  string_agg(schema_id || ':' || status || ':' || registered_at::text || ':'
             || coalesce(materialized_at::text, ''), ',' ORDER BY schema_id), '')
FROM p2panda.schemas
"""


def _state(conn: psycopg.Connection, busy: set[str], partitions: set[str]) -> str:
    """Everything a registration tick decides on but the cursor: the index, the registry,
    runs in progress and existing partitions. Unchanged, the tick has nothing to do."""
    text = conn.execute(STATE).fetchone()[0]
    text += "|" + ",".join(sorted(busy)) + "|" + str(len(partitions))
    return hashlib.sha1(text.encode()).hexdigest()


def registration_tick(
    conn: psycopg.Connection, instance: dg.DagsterInstance, cursor: RegistrationCursor
) -> tuple[dg.SensorResult, list[str]]:
    """One evaluation of the registration sensor; also the warnings to log."""
    partitions = set(instance.get_dynamic_partitions(schemas.name))
    busy = busy_partitions(instance)
    state = _state(conn, busy, partitions)
    new_ids = sorted(set(registry(conn)) - partitions)
    if state == cursor.state and not new_ids:
        return dg.SensorResult(skip_reason="nothing changed", cursor=cursor.dumps()), []
    rel = Relations.load(conn)
    cycles = rel.cycles()
    issued, requests, notes = dict(cursor.issued), [], []
    waiting = {s for s in rel.registry if not rel.ready(s)}
    for sid in rel.ordered(rel.registry):
        key = build_key(rel, sid, sid in cursor.waiting)
        if key is None or issued.get(sid) == key:
            if sid in waiting and sid not in cycles:
                notes.append(f"{sid} waits: {rel.why_waiting(sid)}")
            continue
        if busy & {sid, *rel.upstream(sid)}:
            notes.append(f"{sid} waits for a run in progress")
            if sid in cursor.waiting:
                waiting.add(sid)  # still owed the build its wait ended with
            continue
        issued[sid] = key
        requests.append(request(sid, key))
    reported = sorted(set(cycles.values()))
    new_cycles = [msg for msg in reported if msg not in cursor.cycles]
    notes += [f"{msg}: not built ({', '.join(_members(cycles, msg))})" for msg in reported]
    next_cursor = RegistrationCursor(
        issued={s: k for s, k in issued.items() if s in rel.registry},
        waiting=sorted(waiting),
        cycles=reported,
        state=state,
    )
    result = dg.SensorResult(
        run_requests=batched(requests),
        skip_reason=None if requests else _skip(notes, "no schema to build"),
        cursor=next_cursor.dumps(),
        dynamic_partitions_requests=[schemas.build_add_request(new_ids)] if new_ids else [],
        asset_events=_cycle_observations(cycles, new_cycles, partitions | set(new_ids)),
    )
    warnings = [f"{msg}: not built ({', '.join(_members(cycles, msg))})" for msg in new_cycles]
    return result, warnings


def _members(cycles: Mapping[str, str], message: str) -> list[str]:
    return sorted(s for s, m in cycles.items() if m == message)


def _cycle_observations(
    cycles: Mapping[str, str], new: list[str], partitions: set[str]
) -> list[dg.AssetObservation]:
    """A cycle is reported on each schema in it: an observation of its plan's partition."""
    return [
        dg.AssetObservation(
            asset_key="migration_plan",
            partition=sid,
            metadata={"waiting": f"{Reason.RELATION_CYCLE}: {msg}"},
        )
        for sid, msg in sorted(cycles.items())
        if msg in new and sid in partitions
    ]


# Every sensor requests the family job, on by default, at the interval the latency goal asks.
pipeline_sensor = dg.sensor(
    job=materialize_schema_job,
    minimum_interval_seconds=MINIMUM_INTERVAL_SECONDS,
    default_status=dg.DefaultSensorStatus.RUNNING,
)


@pipeline_sensor
def schema_registration_sensor(
    context: dg.SensorEvaluationContext, postgres: PostgresResource
) -> dg.SensorResult:
    """Adds a partition per registered schema and builds it once its relations are ready;
    rebuilds a schema when it stops waiting, or when a schema it cascades from was rebuilt.
    Relation cycles are reported (log, skip reason, an observation per schema), not built."""
    with postgres.connect() as conn:
        result, warnings = registration_tick(
            conn, context.instance, RegistrationCursor.parse(context.cursor)
        )
    for warning in warnings:
        context.log.warning(warning)
    return result


# --- new entries ---------------------------------------------------------------------------


@dataclass(frozen=True)
class EntryCursor:
    """How far the entries sensor has read `p2panda.entries.ingest_seq`.

    `ingest_seq` is taken when a row is inserted, not when it commits, so concurrent
    ingests commit values out of order: after the sensor has seen 120, a transaction may
    still commit 117. The cursor keeps the highest value seen and the *holes* below it
    (ranges not seen yet, with when they were first seen), and reads both each tick. A
    hole is forgotten when it cannot fill any more: when, before the tick's snapshot, no
    transaction was writing to the entry store and the sequence had passed it (values
    burnt by duplicates or rolled back stay holes only until then), or after
    `HOLE_TTL_SECONDS`. Counting entries per log instead would need a scan of the store
    every tick; a fixed window below the maximum would lose the late rows of large
    concurrent batches.
    """

    seq: int = 0
    holes: tuple[tuple[int, int, float], ...] = ()

    @classmethod
    def parse(cls, text: str | None) -> Self:
        data = _loads(text)
        holes = tuple((int(lo), int(hi), float(born)) for lo, hi, born in data.get("holes", ()))
        return cls(int(data.get("seq", 0)), holes)

    def dumps(self) -> str:
        return json.dumps({"seq": self.seq, "holes": [list(h) for h in self.holes]})


@dataclass(frozen=True, slots=True)
class FreshLog:
    """A log with entries new to the sensor, and the ingest_seq range they span."""

    author: bytes
    log_id: int
    first: int
    last: int

    @property
    def schema_id(self) -> str:
        return format_schema_id(self.author, self.log_id)


WRITERS = """
SELECT (SELECT count(*) FROM pg_locks WHERE relation = 'p2panda.entries'::regclass
          AND mode = 'RowExclusiveLock' AND pid <> pg_backend_pid()),
       coalesce(pg_sequence_last_value(
          pg_get_serial_sequence('p2panda.entries', 'ingest_seq')::regclass), 0)
"""
INTERVALS = """
WITH iv(lo, hi, born) AS (
    SELECT * FROM unnest(%(lo)s::bigint[], %(hi)s::bigint[], %(born)s::float8[])
    UNION ALL SELECT %(seq)s + 1, %(top)s, %(now)s WHERE %(top)s > %(seq)s
)
"""
NEW_HOLES = (
    INTERVALS
    + """, marks AS (
    SELECT iv.lo, iv.born, e.ingest_seq AS s
    FROM iv JOIN p2panda.entries e ON e.ingest_seq BETWEEN iv.lo AND iv.hi
    UNION ALL SELECT lo, born, lo - 1 FROM iv
    UNION ALL SELECT lo, born, hi + 1 FROM iv
), gaps AS (
    SELECT born, lag(s) OVER (PARTITION BY lo ORDER BY s) + 1 AS lo, s - 1 AS hi FROM marks
)
SELECT lo, hi, born FROM gaps WHERE hi >= lo ORDER BY lo
"""
)
FRESH_LOGS = (
    INTERVALS
    + """
SELECT e.author, e.log_id, min(e.ingest_seq), max(e.ingest_seq)
FROM iv JOIN p2panda.entries e ON e.ingest_seq BETWEEN iv.lo AND iv.hi
WHERE e.author IS NOT NULL
GROUP BY e.author, e.log_id ORDER BY min(e.ingest_seq)
"""
)


def read_new_entries(
    conn: psycopg.Connection, cursor: EntryCursor, now: float | None = None
) -> tuple[list[FreshLog], EntryCursor]:
    """The logs with entries the cursor has not seen, and the cursor past them."""
    now = time.time() if now is None else now
    writers, handed_out = conn.execute(WRITERS).fetchone()
    with conn.transaction():  # one snapshot for the holes and the entries
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        top = conn.execute("SELECT coalesce(max(ingest_seq), 0) FROM p2panda.entries").fetchone()
        params = {
            "seq": cursor.seq,
            "top": max(cursor.seq, top[0]),
            "now": now,
            "lo": [h[0] for h in cursor.holes],
            "hi": [h[1] for h in cursor.holes],
            "born": [h[2] for h in cursor.holes],
        }
        holes = conn.execute(NEW_HOLES, params).fetchall()
        rows = conn.execute(FRESH_LOGS, params).fetchall()
    kept = [
        (lo, hi, born)
        for lo, hi, born in holes
        if now - born < HOLE_TTL_SECONDS and (writers or hi > handed_out)
    ][-MAX_HOLES:]
    fresh = [FreshLog(bytes(a), int(log), int(first), int(last)) for a, log, first, last in rows]
    return fresh, EntryCursor(params["top"], tuple(kept))


@dataclass
class Route:
    """Why a schema is concerned by new entries, and their ingest_seq range."""

    own_log: bool
    first: int
    last: int

    def widen(self, log: FreshLog, own_log: bool) -> Self:
        return Route(self.own_log or own_log, min(self.first, log.first), max(self.last, log.last))


ASSIGNED = """
SELECT l.author, l.log_id, l.schema_id, l.ref_schema_id, l.ref_hash
FROM unnest(%s::bytea[], %s::numeric[]) AS f(author, log_id)
JOIN p2panda.logs l ON l.author = f.author AND l.log_id = f.log_id
"""
PEEK = """
SELECT f.author, f.log_id, p.payload
FROM unnest(%s::bytea[], %s::numeric[]) AS f(author, log_id)
CROSS JOIN LATERAL (
    SELECT e.payload FROM p2panda.entries e
    WHERE e.author = f.author AND e.log_id = f.log_id AND e.payload IS NOT NULL
    ORDER BY e.seq_num LIMIT %s
) p
"""


def route_entries(
    conn: psycopg.Connection, fresh: list[FreshLog], registered: set[str]
) -> dict[str, Route]:
    """The registered schemas new entries concern, without verifying them (the index
    step does that, once). A log is routed to:

    - the schema it is the log of (its id is the schema id): a schema change;
    - the schema the index assigned it to (`p2panda.logs.schema_id`);
    - for a log the index has not assigned (new, or waiting for its schema): the schemas
      its first reference names (as indexed) and that the payloads of its first
      `PEEK_ENTRIES` entries name: a log is assigned to the schema its first message
      names, so this is where it will go. The payloads are only read, never trusted: a
      forged one costs one needless rebuild, and its entry is rejected by the index.

    A log that names no registered schema concerns no table: its entries are verified and
    accounted by the next run of any schema.
    """
    routes: dict[str, Route] = {}

    def add(schema_id: str | None, log: FreshLog, own_log: bool = False) -> None:
        if schema_id in registered:
            old = routes.get(schema_id)
            routes[schema_id] = (
                Route(own_log, log.first, log.last) if old is None else old.widen(log, own_log)
            )

    unassigned = []
    assigned = _assigned(conn, fresh)
    for log in fresh:
        if log.schema_id in registered:
            add(log.schema_id, log, own_log=True)
        elif assigned.get((log.author, log.log_id), (None,))[0] is not None:
            add(assigned[(log.author, log.log_id)][0], log)
        else:
            unassigned.append(log)
    named = _named_schemas(conn, unassigned, assigned)
    for log in unassigned:
        for schema_id in named.get((log.author, log.log_id), ()):
            add(schema_id, log)
    return routes


def _keys(logs: list[FreshLog]) -> tuple[list[bytes], list[Decimal]]:
    return [log.author for log in logs], [Decimal(log.log_id) for log in logs]


def _assigned(
    conn: psycopg.Connection, fresh: list[FreshLog]
) -> dict[tuple[bytes, int], tuple[str | None, str | None, bytes | None]]:
    if not fresh:
        return {}
    rows = conn.execute(ASSIGNED, _keys(fresh)).fetchall()
    return {
        (bytes(a), int(log)): (sid, ref, None if h is None else bytes(h))
        for a, log, sid, ref, h in rows
    }


def _named_schemas(
    conn: psycopg.Connection,
    logs: list[FreshLog],
    assigned: Mapping[tuple[bytes, int], tuple[str | None, str | None, bytes | None]],
) -> dict[tuple[bytes, int], set[str]]:
    """Per log, the schema ids its indexed first reference and its first payloads name."""
    if not logs:
        return {}
    ids: dict[tuple[bytes, int], set[str]] = {}
    hashes: dict[tuple[bytes, int], set[bytes]] = {}
    for key in ((log.author, log.log_id) for log in logs):
        _, ref, ref_hash = assigned.get(key, (None, None, None))
        ids[key] = {ref} if ref else set()
        hashes[key] = {ref_hash} if ref_hash else set()
    authors, log_ids = _keys(logs)
    for author, log_id, payload in conn.execute(PEEK, (authors, log_ids, PEEK_ENTRIES)):
        _kind, schema_id, _version, schema_hash, _instance = message_index(bytes(payload))
        key = (bytes(author), int(log_id))
        if schema_id:
            ids[key].add(schema_id)
        if schema_hash:
            hashes[key].add(schema_hash)
    owners = _schema_of_hashes(conn, {h for found in hashes.values() for h in found})
    for key, found in hashes.items():
        ids[key] |= {owners[h] for h in found if h in owners}
    return ids


def _schema_of_hashes(conn: psycopg.Connection, hashes: set[bytes]) -> dict[bytes, str]:
    """The schema log each schema version hash is an entry of."""
    if not hashes:
        return {}
    rows = conn.execute(
        "SELECT hash, author, log_id FROM p2panda.entries WHERE hash = ANY(%s)"
        " AND author IS NOT NULL",
        (list(hashes),),
    ).fetchall()
    return {bytes(h): format_schema_id(bytes(a), int(log)) for h, a, log in rows}


def entries_requests(
    rel: Relations,
    routes: Mapping[str, Route],
    queued: Mapping[str, frozenset[dg.AssetKey]] | None = None,
) -> tuple[list, list[str]]:
    """The rebuild each concerned schema gets (run key `entries-<schema>-<first>-<last>`,
    the ingest_seq range of its new entries, disjoint from every other tick's):

    - ready (relations materialized), or not indexed yet: the whole family;
    - its own log changed while it waits: up to the plan (the index learns the new version,
      which may end the wait; the registration sensor builds the table once it is ready);
    - new instance entries while it waits: nothing; the table is built when it is ready;
    - nothing where a run still in the queue (`queued`) builds those assets already: it
      reads the new entries when it starts.
    """
    requests, notes = [], []
    for sid in rel.ordered(routes):
        route = routes[sid]
        key = f"entries-{sid}-{route.first}-{route.last}"
        if not rel.indexed(sid) or rel.ready(sid):
            wanted = request(sid, key)
        elif route.own_log:
            wanted = request(sid, key, UP_TO_PLAN)
            notes.append(f"{sid}: table waits ({rel.why_waiting(sid)})")
        else:
            notes.append(f"{sid}: new entries wait ({rel.why_waiting(sid)})")
            continue
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
) -> dg.SensorResult:
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
    requests, notes = entries_requests(Relations.load(conn), routes, queued)
    return dg.SensorResult(
        run_requests=batched(requests),
        skip_reason=None if requests else _skip(notes, "nothing to rebuild"),
        cursor=moved.dumps(),
    )


@pipeline_sensor
def schema_entries_sensor(
    context: dg.SensorEvaluationContext, postgres: PostgresResource
) -> dg.SensorResult:
    """Rebuilds the schemas that new entries (by ingest_seq) concern, only those, unless
    a run of theirs still in the queue will read the entries anyway."""
    queued = queued_selections(context.instance)
    with postgres.connect() as conn:
        return entries_tick(conn, EntryCursor.parse(context.cursor), queued=queued)


# --- schema reverts ------------------------------------------------------------------------


REVERTS = """
SELECT s.schema_id, e.seq_num
FROM p2panda.schemas s
JOIN p2panda.entries e ON e.author = s.author AND e.log_id = s.log_id
JOIN p2panda.message_index m ON m.hash = e.hash
WHERE m.kind = 'schema-revert'
ORDER BY 1, 2
"""


def verified_reverts(conn: psycopg.Connection) -> dict[str, list[int]]:
    """Per registered schema, the seqs of the schema-revert entries the index verified."""
    found: dict[str, list[int]] = {}
    for schema_id, seq in conn.execute(REVERTS):
        found.setdefault(schema_id, []).append(int(seq))
    return found


@dataclass(frozen=True)
class RevertCursor:
    """The reverts handled, per schema (seqs). Reverts are found in `message_index`, which
    only the index step fills, after it verified them, so a cursor over ingest_seq could
    pass a revert before it is verified and never see it; schema logs are small, so the
    registered schemas' logs are read whole each tick instead."""

    handled: dict[str, list[int]] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str | None) -> Self:
        return cls(_loads(text).get("handled", {}))

    def dumps(self) -> str:
        return json.dumps({"handled": self.handled}, sort_keys=True)


def revert_requests(
    rel: Relations, schema_id: str, seq: int
) -> tuple[list[dg.RunRequest], list[str]]:
    """`migration_plan` and `materialized_table` of the reverted schema and of every
    registered schema whose relations reach it, upstream first; a schema that is not
    ready (cycle, unregistered or unmaterialized upstream) is left out."""
    requests, notes, pending = [], [], set()
    for target in [schema_id, *rel.dependents(schema_id)]:
        if rel.ready(target, pending):
            pending.add(target)
            requests.append(request(target, f"revert-{schema_id}-{seq}-{target}", PLAN_AND_TABLE))
        else:
            notes.append(f"{target} waits: {rel.why_waiting(target)}")
    return requests, notes


def revert_tick(
    conn: psycopg.Connection, instance: dg.DagsterInstance, cursor: RevertCursor
) -> dg.SensorResult:
    found = verified_reverts(conn)
    new = {s: seqs for s, seqs in found.items() if set(seqs) - set(cursor.handled.get(s, ()))}
    if not new:
        return dg.SensorResult(skip_reason="no new schema-revert entries", cursor=cursor.dumps())
    busy = busy_partitions(instance)
    rel = Relations.load(conn)
    handled = {s: seqs for s, seqs in cursor.handled.items() if s in found}
    requests, notes = [], []
    for sid in rel.ordered(new):
        if sid in busy:  # the run that indexed the revert is still writing this schema
            notes.append(f"revert of {sid} waits for its run in progress")
            continue
        latest = max(set(new[sid]) - set(cursor.handled.get(sid, ())))
        more, why = revert_requests(rel, sid, latest)
        requests += more
        notes += why
        handled[sid] = found[sid]
    return dg.SensorResult(
        run_requests=batched(requests),
        skip_reason=None if requests else _skip(notes, "nothing to rebuild"),
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
    the entries sensor's rebuild of the schema; a revert waits while that run is still
    writing the schema (its decoded messages, its table)."""
    with postgres.connect() as conn:
        return revert_tick(conn, context.instance, RevertCursor.parse(context.cursor))


sensors = [schema_registration_sensor, schema_entries_sensor, schema_revert_sensor]
