"""What the sensors read of the store: the registry, new entries by `ingest_seq` (with the
holes concurrent ingests leave), where their logs go, and the verified schema reverts.

Every statement here only reads. The cursor arithmetic around them is the sensors'
(`p2panda_assets.defs.sensors`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal

import psycopg

from p2panda_assets.engine.readiness import Registered
from p2panda_assets.protocol.ids import format_schema_id
from p2panda_assets.protocol.messages import SchemaRevert
from p2panda_assets.store import tables
from p2panda_assets.store.pipeline_state import fingerprint_bound

LogKey = tuple[bytes, int]  # (author, log id)
Hole = tuple[int, int, float]  # (lowest, highest ingest_seq not seen, when first seen)


# --- the registry -----------------------------------------------------------------------------


def registry(conn: psycopg.Connection) -> dict[str, Registered]:
    """Every registered schema with its status and when it was registered and built."""
    rows = conn.execute(
        "SELECT schema_id, status, registered_at, materialized_at FROM p2panda.schemas"
        " ORDER BY schema_id"
    ).fetchall()
    return {sid: Registered(status, at, built) for sid, status, at, built in rows}


STATE = """
SELECT coalesce((SELECT fingerprint FROM p2panda.index_state), '') || '|' || coalesce(
  string_agg(schema_id || ':' || status || ':' || registered_at::text || ':'
             || coalesce(materialized_at::text, ''), ',' ORDER BY schema_id), '')
FROM p2panda.schemas
"""


def registry_state(conn: psycopg.Connection) -> str:
    """The index fingerprint and every registry row in one text: equal texts, equal
    registry and index."""
    row = conn.execute(STATE).fetchone()
    assert row is not None  # an aggregate: always one row
    return str(row[0])


# --- new entries ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FreshLog:
    """A log with entries new to the sensor, and the ingest_seq range they span."""

    author: bytes
    log_id: int
    first: int
    last: int

    @property
    def key(self) -> LogKey:
        return (self.author, self.log_id)

    @property
    def schema_id(self) -> str:
        return format_schema_id(self.author, self.log_id)


@dataclass(frozen=True, slots=True)
class Writers:
    """Ingest transactions writing to the entry store now (other than ours), and the last
    `ingest_seq` handed out."""

    active: int
    handed_out: int


@dataclass(frozen=True, slots=True)
class Feed:
    """One snapshot of the entries beyond a cursor: the highest `ingest_seq` committed,
    the ranges still not seen below it (holes), and the logs of the entries found."""

    top: int
    holes: list[Hole]
    logs: list[FreshLog]


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


def writers(conn: psycopg.Connection) -> Writers:
    """Read before the snapshot of `feed`: a writer seen here may commit into it."""
    row = conn.execute(WRITERS).fetchone()
    assert row is not None
    return Writers(int(row[0]), int(row[1]))


def feed(conn: psycopg.Connection, seq: int, holes: Sequence[Hole], now: float) -> Feed:
    """The entries above `seq` and in `holes`, in one snapshot: the holes left among
    them (the new range above `seq` first seen `now`) and their logs."""
    with conn.transaction():  # one snapshot for the holes and the entries
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        row = conn.execute("SELECT coalesce(max(ingest_seq), 0) FROM p2panda.entries").fetchone()
        assert row is not None
        top = max(seq, int(row[0]))
        params = {
            "seq": seq,
            "top": top,
            "now": now,
            "lo": [h[0] for h in holes],
            "hi": [h[1] for h in holes],
            "born": [h[2] for h in holes],
        }
        found = conn.execute(NEW_HOLES, params).fetchall()
        rows = conn.execute(FRESH_LOGS, params).fetchall()
    return Feed(
        top=top,
        holes=[(int(lo), int(hi), float(born)) for lo, hi, born in found],
        logs=[FreshLog(bytes(a), int(log), int(first), int(last)) for a, log, first, last in rows],
    )


# --- where the logs of new entries go -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LogAssignment:
    """What the index step recorded of a log (`p2panda.logs`): its schema, if assigned,
    and the schema its first message names (by id, or by version hash)."""

    schema_id: str | None
    ref_schema_id: str | None
    ref_hash: bytes | None


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
SCHEMA_OF_HASHES = """
SELECT hash, author, log_id FROM p2panda.entries WHERE hash = ANY(%s) AND author IS NOT NULL
"""


def _keys(logs: Sequence[LogKey]) -> tuple[list[bytes], list[Decimal]]:
    return [author for author, _ in logs], [Decimal(log_id) for _, log_id in logs]


def log_assignments(
    conn: psycopg.Connection, logs: Sequence[LogKey]
) -> dict[LogKey, LogAssignment]:
    """The logs among `logs` the index step has seen, with what it recorded of them."""
    if not logs:
        return {}
    rows = conn.execute(ASSIGNED, _keys(logs)).fetchall()
    return {
        (bytes(a), int(log)): LogAssignment(sid, ref, None if h is None else bytes(h))
        for a, log, sid, ref, h in rows
    }


def first_payloads(
    conn: psycopg.Connection, logs: Sequence[LogKey], limit: int
) -> Iterator[tuple[LogKey, bytes]]:
    """The payloads of the first `limit` entries of each log (unverified: only read)."""
    if not logs:
        return
    for author, log_id, payload in conn.execute(PEEK, (*_keys(logs), limit)):
        yield (bytes(author), int(log_id)), bytes(payload)


def schema_of_hashes(conn: psycopg.Connection, hashes: set[bytes]) -> dict[bytes, str]:
    """The schema log each schema version hash is an entry of."""
    if not hashes:
        return {}
    rows = conn.execute(SCHEMA_OF_HASHES, (list(hashes),)).fetchall()
    return {bytes(h): format_schema_id(bytes(a), int(log)) for h, a, log in rows}


def built_through(conn: psycopg.Connection, schema_ids: Sequence[str]) -> dict[str, int]:
    """Per schema among `schema_ids` whose table is built: the ingest_seq up to which every
    entry was verified when it was built (its table holds what they make of it)."""
    built = tables.built_fingerprints(conn, schema_ids)
    bounds = {s: fingerprint_bound(fingerprint) for s, fingerprint in built.items()}
    return {s: bound for s, bound in bounds.items() if bound is not None}


# --- schema reverts -----------------------------------------------------------------------------


REVERTS = """
SELECT s.schema_id, e.seq_num, e.ingest_seq
FROM p2panda.schemas s
JOIN p2panda.entries e ON e.author = s.author AND e.log_id = s.log_id
JOIN p2panda.message_index m ON m.hash = e.hash
WHERE m.kind = %s
ORDER BY 1, 2
"""


def verified_reverts(conn: psycopg.Connection) -> dict[str, dict[int, int]]:
    """Per registered schema, the schema-revert entries the index verified: seq ->
    ingest_seq."""
    found: dict[str, dict[int, int]] = {}
    for schema_id, seq, ingest_seq in conn.execute(REVERTS, (SchemaRevert.kind,)):
        found.setdefault(schema_id, {})[int(seq)] = int(ingest_seq)
    return found
