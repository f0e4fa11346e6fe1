"""The one writer of `p2panda.index_state`: what the last index step saw (its
fingerprint and the newest verified batch), so that a run finding the same has nothing
to chain or assign again.

An index step records it as its last write and a restart of verification forgets it;
with both statements here, nothing else can mark the index up to date. Each function
does one write in the caller's transaction (`pipeline_state.commit_index`,
`commit_appended`, `restart_verification`). The reads stay with the progress row's
(`pipeline_state.indexed_fingerprint`, `indexed_batch`).
"""

from __future__ import annotations

import psycopg


def record_index_state(conn: psycopg.Connection, fingerprint: str, batch: int) -> None:
    """The index is made from what `fingerprint` names, up to verified batch `batch`."""
    conn.execute(
        "INSERT INTO p2panda.index_state (id, fingerprint, batch) VALUES (1, %s, %s)"
        " ON CONFLICT (id) DO UPDATE SET fingerprint = EXCLUDED.fingerprint,"
        " batch = EXCLUDED.batch",
        (fingerprint, batch),
    )


def forget_index_state(conn: psycopg.Connection) -> None:
    """No index step has run: the next one chains every log."""
    conn.execute("DELETE FROM p2panda.index_state")
