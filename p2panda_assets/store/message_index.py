"""The one writer of `p2panda.message_index`: the index of the good schema messages
(meta, migration, revert), where the sensors find reverts without decoding payloads.

Verification appends to it, a restart of verification empties it, and ingest drops the
rows of an entry it replaced; with every statement that writes the table here, no other
module changes what the sensors read. Each function does one write in the caller's
transaction (`pipeline_state.commit_verification`, `restart_verification`,
`ingest.store_round`).
"""

from __future__ import annotations

from collections.abc import Sequence

import psycopg
from psycopg import sql


def add_staged_index(conn: psycopg.Connection, staged: sql.Identifier) -> None:
    """The index rows one verification staged; an entry indexed already keeps its row."""
    conn.execute(
        sql.SQL(
            "INSERT INTO p2panda.message_index SELECT * FROM {} ON CONFLICT (hash) DO NOTHING"
        ).format(staged)
    )


def forget_message_index(conn: psycopg.Connection) -> None:
    """Empty the index: every entry is verified again."""
    conn.execute("DELETE FROM p2panda.message_index")


def forget_replaced_entries(conn: psycopg.Connection, hashes: Sequence[bytes]) -> None:
    """Drop the index rows of entries an ingest replaced: each is verified again."""
    conn.execute("DELETE FROM p2panda.message_index WHERE hash = ANY(%s)", (list(hashes),))
