"""The catalog (every schema log folded, `engine.corpus.Catalog`) from the store, in this
process: schema logs are small, and the commands that need them (`panda check`, the
sensors, the migration plan) should not start Spark for them."""

from __future__ import annotations

import psycopg

from p2panda_assets.engine.corpus import Catalog, LogKey, chain_log, cut_log, schema_id_of
from p2panda_assets.protocol.entry import decode_entry
from p2panda_assets.store.pipeline_state import VERIFIED_GOOD


def load_catalog(
    conn: psycopg.Connection,
    schema_logs: list[LogKey],
    registered: set[str],
    cut: dict[str, int] | None = None,
) -> Catalog:
    """Fold the schema logs (small) in the driver, from the verified entries; the logs
    named in `cut` only up to the version given (`engine.corpus.cut_log`)."""
    chained = []
    for author, log_id in schema_logs:
        rows = conn.execute(
            "SELECT e.entry, e.payload FROM p2panda.entries e"
            " WHERE e.author = %s AND e.log_id = %s AND" + VERIFIED_GOOD,
            (author, log_id),
        ).fetchall()
        log = chain_log(author, log_id, [(decode_entry(bytes(e)), bytes(p)) for e, p in rows])
        version = (cut or {}).get(schema_id_of(log.key))
        chained.append(log if version is None else cut_log(log, version))
    return Catalog.build(chained, registered)


def registered_schemas(conn: psycopg.Connection) -> set[str]:
    return {row[0] for row in conn.execute("SELECT schema_id FROM p2panda.schemas")}


def stored_catalog(conn: psycopg.Connection, cut: dict[str, int] | None = None) -> Catalog:
    """The catalog as of the last index step (schema logs as the logs table lists them)."""
    return load_catalog(conn, schema_logs(conn), registered_schemas(conn), cut)


def schema_logs(conn: psycopg.Connection) -> list[LogKey]:
    """The schema logs the logs table lists (by its partial index `logs_schema_logs`)."""
    return [
        (bytes(author), int(log_id))
        for author, log_id in conn.execute(
            "SELECT author, log_id FROM p2panda.logs WHERE is_schema"
        )
    ]
