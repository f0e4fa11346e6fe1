"""The one writer of `p2panda.layer_digests`: the sums of each chained layer of the
columnar store, which the build plan's digests add up (`pipeline.build.increments`).

A layer is written once under a name of its own, so its sums never change: they are
only added, and forgotten when the layer is no longer read. Both statements are here;
`pipeline_state.keep_layer_digests` runs them in one transaction, and reads them back
(`pipeline_state.layer_digests`, whose `LayerSums` the rows are).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import psycopg
from psycopg.types.json import Jsonb


def forget_layers_except(conn: psycopg.Connection, layers: Sequence[str]) -> None:
    """Drop the sums of every layer not in `layers` (those read now)."""
    conn.execute("DELETE FROM p2panda.layer_digests WHERE NOT (layer = ANY(%s))", (list(layers),))


def add_layer_sums(
    conn: psycopg.Connection, sums: Mapping[str, Iterable[Sequence[object]]]
) -> None:
    """Keep the sums of each layer that has none yet (rows of `LayerSums`)."""
    with conn.cursor() as cursor:
        cursor.executemany(
            "INSERT INTO p2panda.layer_digests (layer, sums) VALUES (%s, %s)"
            " ON CONFLICT (layer) DO NOTHING",
            [(layer, Jsonb([list(row) for row in rows])) for layer, rows in sums.items()],
        )
