"""The catalog (every schema log folded, `engine.corpus.Catalog`) from the store, in this
process: schema logs are small, and the commands that need them (`panda check`, the
sensors, the migration plan) should not start Spark for them."""

from __future__ import annotations

import psycopg

from p2panda_assets.engine.corpus import (
    Catalog,
    LogKey,
    chain_log,
    check_record,
    cut_log,
    schema_id_of,
)
from p2panda_assets.engine.schema_log import fold_schema_log
from p2panda_assets.protocol.entry import decode_entry
from p2panda_assets.store.pipeline_state import VERIFIED_GOOD

# How many entries of a log `stored_schema_name` reads: a schema log is a few versions; a
# log registered by mistake (an instance log) may be long and has no name anyway.
NAME_READ_ENTRIES = 10_000


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


def stored_schema_name(conn: psycopg.Connection, author: bytes, log_id: int) -> str | None:
    """The name in the schema log's meta message as the store holds the log now: what a
    schema registered without `--name` will be known by. Read at registration, before
    the pipeline has verified the entries, so each is checked here (a forged entry
    cannot lend the log a name); None for a log the store has no schema of."""
    rows = conn.execute(
        "SELECT entry, payload FROM p2panda.entries WHERE author = %s AND log_id = %s"
        " ORDER BY seq_num LIMIT %s",
        (author, log_id, NAME_READ_ENTRIES),
    ).fetchall()
    checked = [(check_record(bytes(e), None if p is None else bytes(p)), p) for e, p in rows]
    good = [(c.entry, bytes(p)) for c, p in checked if c.entry is not None]
    log = chain_log(author, log_id, good)
    if not log.summary.is_schema:
        return None
    return fold_schema_log(author, log_id, log.items).name


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
