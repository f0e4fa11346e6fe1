"""Every stored entry with its payload, for `panda schema NAME revert|migrate` to reduce
with the pure engine before publishing (`authoring.schema_ops.ChangePreview`).

All of them, not only one schema's logs: which instance logs belong to a schema, and
which schemas its relations need, is what the reduction itself decides. Entries the
pipeline has not verified yet are read too, since the next build will reduce them.
"""

from __future__ import annotations

import psycopg


def stored_pairs(conn: psycopg.Connection) -> list[tuple[bytes, bytes | None]]:
    """(entry, payload) of every stored entry, in the order they arrived; none in a
    database the product's tables are not in yet."""
    found = conn.execute("SELECT to_regclass('p2panda.entries') IS NOT NULL").fetchone()
    if found is None or not found[0]:
        return []
    rows = conn.execute("SELECT entry, payload FROM p2panda.entries ORDER BY ingest_seq")
    return [(bytes(entry), None if payload is None else bytes(payload)) for entry, payload in rows]
