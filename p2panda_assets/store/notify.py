"""The entry store's notification channel (`notify.sql`): what the live path listens to."""

from __future__ import annotations

import psycopg

CHANNEL = "p2panda_entries"  # notified once per statement that inserts entries (notify.sql)


def listen(conn: psycopg.Connection) -> None:
    """Subscribe `conn` (autocommit) to the channel: `conn.notifies()` yields from now on."""
    conn.execute(f"LISTEN {CHANNEL}")
