"""Merging the smallest chained layers into one, so that appending never has to chain
the whole store again because the layers are many (issue 58).

Every index step that appends writes one more layer on top of the first run, and each
layer costs every later read of the messages a scan (~20 ms). Chaining every log again
at `PipelineTuning.max_layers` layers bounded that, at the cost of the whole store once
every dozen runs (~15 s at 1M entries, ~56 s at 5M, inside a live run). Instead, the
small layers are merged as a log-structured merge tree merges its files: the messages
stay what they are (a layer holds accepted, chained messages of logs continued from
their tips, and no two layers hold one entry, so a merge only puts them in fewer
files), the first run is never rewritten, and which layers merge is chosen so that a
merge costs what it merges and each message is merged about log2(appended) times in
all (`layers_to_merge`). Nothing reads the layers in an order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import psycopg
from pyspark.sql import SparkSession

from p2panda_assets.pipeline.columnar.key_index import index_layer
from p2panda_assets.pipeline.columnar.warehouse import Warehouse
from p2panda_assets.pipeline.index.paths import index_steps
from p2panda_assets.pipeline.kernels.digests import merged_sums
from p2panda_assets.store import pipeline_state as state_sql


def layers_to_merge(counts: Sequence[int], most: int) -> list[int] | None:
    """Which layers to merge into one (their places in `counts`, the messages each layer
    holds, the first run first), when there are `most` layers; None when there are
    fewer, or too few above the first run to merge.

    The two smallest layers above the first run always merge; the next smallest joins
    while it holds no more messages than those chosen before it. So a merge folds layers
    of about one size, and the layers' sizes end up like the digits of a binary counter:
    a message is merged again only once the messages appended after it have about
    doubled (unit appends: each merged ~10 times in 100,000 runs), and the first run,
    most of a large store, never."""
    if len(counts) < max(most, 3):  # the first run, and two layers to merge at least
        return None
    smallest = sorted(range(1, len(counts)), key=lambda place: counts[place])
    chosen = smallest[:2]
    total = sum(counts[place] for place in chosen)
    for place in smallest[2:]:
        if counts[place] > total:
            break
        chosen.append(place)
        total += counts[place]
    return sorted(chosen)


def merge_small_layers(
    spark: SparkSession,
    conn: psycopg.Connection,
    warehouse: Warehouse,
    state: state_sql.PipelineState,
    most: int,
) -> state_sql.PipelineState | None:
    """The store's state with its smallest layers merged into one (committed), if it holds
    `most` layers; `state` itself if it holds fewer. None when they cannot be merged:
    a layer has no kept sums (written by an earlier release) or there are too few above
    the first run; then only chaining every log again bounds the layers.

    The layers merge in the driver when they hold few messages (pyarrow), else in a
    Spark job (`IndexSteps.merge`). The replaced layers' files stay until the next step
    (`layers.keep_chained`), as every earlier layer's do."""
    layers = state.layers
    if len(layers) < most:
        return state
    kept = state_sql.layer_digests(conn, layers)
    if set(kept) != set(layers):
        return None
    counts = [sum(row[3] for row in kept[layer]) for layer in layers]
    places = layers_to_merge(counts, most)
    if places is None:
        return None
    merging = [layers[place] for place in places]
    steps = index_steps(spark, warehouse, sum(counts[place] for place in places))
    run = steps.merge([warehouse.chained(layer) for layer in merging])
    deltas = (*(layer for layer in layers[1:] if layer not in merging), run)
    try:
        index_layer(warehouse.chained(run))
        sums = {run: merged_sums(kept[m] for m in merging)}
        state_sql.commit_merged_layers(conn, (layers[0], *deltas), sums)
    except BaseException:
        steps.remove_run(run)
        raise
    return replace(state, chained_deltas=deltas)
