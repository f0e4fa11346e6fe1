"""The store as the sensors see it, without Spark: entries ingested, schemas registered,
an in-process stand-in for the index step, and runs "finished" by setting the registry.

The stand-in writes exactly what the sensors read of the index step (the verification
mark, the accounts of rejected entries, `message_index` of the schema messages,
`p2panda.logs`, `index_state`), with the engine's own stage functions and the
pipeline's own `plan_logs`; the Spark index itself is tested in tests/pipeline.
"""

from __future__ import annotations

from itertools import groupby

import psycopg

from p2panda_assets.engine.corpus import (
    SCHEMA_KINDS,
    Catalog,
    LogKey,
    LogSummary,
    chain_log,
    check_record,
)
from p2panda_assets.pipeline.index.log_plan import decided_columns, plan_logs
from p2panda_assets.pipeline.kernels.chain import ref_columns
from p2panda_assets.protocol.entry import decode_entry
from p2panda_assets.protocol.ids import parse_schema_id
from p2panda_assets.protocol.message_index import message_index
from p2panda_assets.store import pipeline_state as state_sql
from p2panda_assets.store.catalog import registered_schemas
from p2panda_assets.store.copying import Target, copy_rows
from p2panda_assets.store.ingest import ingest
from p2panda_assets.store.logs import LOG_COLUMN_TYPES
from p2panda_assets.store.new_entries import committed_bound
from p2panda_assets.store.pipeline_state import VERIFIED_GOOD
from p2panda_assets.store.registry import register
from p2panda_assets.store.staging import drop_tables, stage_table


def publish(conn: psycopg.Connection, pairs: list[tuple[bytes, bytes]]) -> None:
    """`panda ingest` of these pairs."""
    ingest(conn, pairs)


def register_schemas(conn: psycopg.Connection, *schema_ids: str) -> None:
    for schema_id in schema_ids:
        author, log_id = parse_schema_id(schema_id)
        register(conn, author, log_id, None)


def index_in_process(conn: psycopg.Connection) -> None:
    """Verify new entries, index their messages, chain and assign every log."""
    state = state_sql.pipeline_state(conn)
    high = committed_bound(conn)
    unverified = conn.execute(
        "SELECT hash, entry, payload FROM p2panda.entries"
        " WHERE verdict IS NULL AND ingest_seq > %s AND ingest_seq <= %s",
        (state.verified_through, high),
    ).fetchall()
    good = 0
    for entry_hash, raw, payload in unverified:
        payload = None if payload is None else bytes(payload)
        checked = check_record(bytes(raw), payload)
        if checked.rejection is not None:
            conn.execute(
                "INSERT INTO p2panda.accounts (hash, state, reason, message, origin)"
                " VALUES (%s, 'rejected', %s, %s, 'verify')",
                (entry_hash, str(checked.rejection.reason), checked.rejection.message),
            )
            continue
        good += 1
        indexed = message_index(payload)
        if indexed[0] in SCHEMA_KINDS:
            conn.execute(
                "INSERT INTO p2panda.message_index VALUES (%s, %s, %s, %s, %s, %s)",
                (entry_hash, *indexed),
            )
    conn.execute(
        "UPDATE p2panda.pipeline_state SET verified_through = %s, good_entries = good_entries + %s",
        (high, good),
    )
    verified = conn.execute(
        "SELECT e.author, e.log_id, e.entry, e.payload FROM p2panda.entries e"
        " WHERE" + VERIFIED_GOOD + " ORDER BY e.author, e.log_id, e.seq_num"
    ).fetchall()
    logs = []
    for (author, log_id), rows in groupby(verified, key=lambda r: (bytes(r[0]), int(r[1]))):
        entries = [(decode_entry(bytes(r[2])), bytes(r[3])) for r in rows]
        logs.append(chain_log(author, log_id, entries))
    summaries = {(log.author, log.log_id): log.summary for log in logs}
    schema_logs = [log for log in logs if log.summary.is_schema]
    catalog = Catalog.build(schema_logs, registered_schemas(conn))
    _replace_logs(conn, summaries, catalog)
    conn.execute(
        "INSERT INTO p2panda.index_state VALUES (1, md5(random()::text))"
        " ON CONFLICT (id) DO UPDATE SET fingerprint = EXCLUDED.fingerprint"
    )


def _replace_logs(
    conn: psycopg.Connection, summaries: dict[LogKey, LogSummary], catalog: Catalog
) -> None:
    """The logs table as an index step plans these logs (where they stand not known)."""
    plan = plan_logs(summaries, catalog, catalog.order())
    unknown = (None, None, None)  # tip seq, ended, clean
    rows = [
        (*key, s.is_schema, *ref_columns(s.first_ref), *decided_columns(plan[key]), *unknown)
        for key, s in summaries.items()
    ]
    stage = stage_table(conn, "logs", "in_process")
    copy_rows(conn, Target.into(stage, LOG_COLUMN_TYPES), rows)
    state_sql.replace_logs(conn, stage)
    drop_tables(conn, [stage])


def finish_runs(conn: psycopg.Connection, *schema_ids: str, status: str = "materialized") -> None:
    """What a run of each schema leaves in the registry, in this order."""
    for schema_id in schema_ids:
        conn.execute(
            "UPDATE p2panda.schemas SET status = %s, materialized_at = clock_timestamp()"
            " WHERE schema_id = %s",
            (status, schema_id),
        )
