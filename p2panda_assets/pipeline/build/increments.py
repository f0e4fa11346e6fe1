"""Incremental builds: which schemas can add only what is new to their table, and the
messages such a build reduces again.

A table records what it was built from (`store.tables.BuildState`): the newest verified
batch, a digest of its messages up to that batch, and a key of its lens. The next build
of the schema is incremental when

- its lens key is the same (its schema log, its cascade fields' targets and its
  upstream schemas did not change),
- the digest of its messages of those batches is the same: no message left (a fork, a
  log assigned elsewhere or a duplicate now) and none joined (a log newly assigned
  here, an entry that filled a gap in its log), so every log of the schema only grew,
- the deleted sets of the other schemas its cascades read are those its table was
  written with, or only grew since (a run that built one of those schemas alone added
  deletes to it): the rows pointing at the ids added since are reduced again with the
  rest (`BuildPlan.deleted_anew`),
- no message of it is held pending (a change anywhere in the catalog may release it),
- its table is there, and no schema its cascade fields name is built whole after the
  increments (a schema built whole before them, one that cascades from none of them,
  is fine: the increments read its new deleted set),
- the new messages are at most half of its messages (else a whole build costs as much).

An instance's reduction depends on its own messages only (the ones that create it or
name it), so the build reduces again every message of each instance that a new message
names, and the new messages that name none. A delete reaches further along cascade
fields: the rows that point at a reduced instance (and, in turn, the rows that point
at those) are reduced again too, and the cascades are decided over them in the driver
(`cascade_increments`). A delete is final, so the deleted sets only grow, unless an
update moved a cascade-deleted instance's relation away from the deleted one: that
schema (and what cascades from it) is then built whole. The rows, accounts and deleted
ids of the reduced instances replace the old ones (`store.tables.apply_increment`).
Whatever is not incremental is built whole: before the increments where it cascades
from none of them (a migration of the schema others cascade from), after them
otherwise.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import reduce

import psycopg
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from p2panda_assets.engine.cascade import cascade_fields
from p2panda_assets.engine.corpus import Catalog
from p2panda_assets.engine.relations import BuildOrder
from p2panda_assets.pipeline.columnar.warehouse import Warehouse
from p2panda_assets.pipeline.kernels.cascade import cascade_sources, cascading_from
from p2panda_assets.pipeline.kernels.declared import (
    MESSAGE_KEY,
    NEW_WITHOUT_KEY,
    after,
    assigned_to,
)
from p2panda_assets.pipeline.spark import expressions
from p2panda_assets.pipeline.spark.expressions import column
from p2panda_assets.pipeline.spark.frames import local_frame
from p2panda_assets.statuses import Assignment
from p2panda_assets.store import pipeline_state as state_sql
from p2panda_assets.store import tables
from p2panda_assets.store.pipeline_state import LayerSums
from p2panda_assets.store.registry import table_name_for
from p2panda_assets.store.tables import BuildState
from p2panda_assets.tuning import tuning

NEW_SHARE = 0.5  # above this share of new messages a schema is built whole


def lens_key(catalog: Catalog, order: BuildOrder, schema_id: str) -> str:
    """What, besides its messages, a schema's rows depend on: every entry of its schema
    log, the schemas its cascade fields name, and its upstream schemas."""
    history = catalog.histories[schema_id]
    parts = [
        repr(sorted((seq, h.hex()) for seq, h in history.entry_hashes.items())),
        repr(cascade_fields(history.lens, catalog.hash_index)),
        repr(order.upstream.get(schema_id, ())),
    ]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Digest:
    """A schema's messages, and every message of the store (whose creates decide who
    may update an instance): digests of those of batches up to its table's batch
    (`before`) and of all of them (`now`), and how many of its own are new."""

    before: str
    now: str
    new: int
    total: int


def layer_sums(
    spark: SparkSession, conn: psycopg.Connection, warehouse: Warehouse, layers: Sequence[str]
) -> LayerSums:
    """The messages of the chained `layers`, summed by schema, assigned or not, and batch:
    a count and a sum of 60 bits of the SHA-256 of each entry hash. A layer is summed
    once, by one Spark job over the layers not summed yet, and its sums are kept in the
    store: an increment's run sums only the layer it appended. The index step keeps the
    sums of each layer it writes (`sums_of_layer`), so this job runs only for layers
    written by earlier releases."""
    kept = state_sql.layer_digests(conn, layers)
    missing = [layer for layer in layers if layer not in kept]
    if missing:
        frames = [
            spark.read.parquet(warehouse.chained(layer)).withColumn("layer", F.lit(layer))
            for layer in missing
        ]
        frame = reduce(DataFrame.unionByName, frames)
        bits = F.conv(F.substring(F.sha2(F.col("hash"), 256), 1, 15), 16, 10)
        assigned = F.col("assignment") == Assignment.ASSIGNED.value
        rows = (
            frame.groupBy("layer", "schema", assigned.alias("assigned"), "batch")
            .agg(F.count("*").alias("count"), F.sum(bits.cast("decimal(38,0)")).alias("sum"))
            .collect()
        )
        summed: dict[str, LayerSums] = {layer: [] for layer in missing}
        for r in rows:
            summed[r["layer"]].append(
                (r["schema"], r["assigned"], int(r["batch"]), int(r["count"]), int(r["sum"]))
            )
        state_sql.keep_layer_digests(conn, summed, layers)
        kept |= summed
    return [row for layer in layers for row in kept[layer]]


def message_digests(sums: LayerSums, built: Mapping[str, int]) -> dict[str, Digest]:
    """The digests of the schemas `built` names (schema -> the batch its table was
    built up to, -1 for none), for the schema's messages and for every message of the
    store (a digest that does not depend on order), added up from `layer_sums`."""

    def total(schema_id: str | None, batch: int | None) -> tuple[int, str]:
        """Count and digest of the messages of `schema_id` (None: of the store) from
        batches up to `batch` (None: from all)."""
        rows = [
            (count, bits)
            for schema, assigned, row_batch, count, bits in sums
            if (schema_id is None or (schema == schema_id and assigned))
            and (batch is None or row_batch <= batch)
        ]
        count = sum(c for c, _ in rows)
        return count, f"{count}:{sum(b for _, b in rows)}"

    digests = {}
    for schema_id, batch in built.items():
        before_count, own_before = total(schema_id, batch)
        count, own_now = total(schema_id, None)
        digests[schema_id] = Digest(
            f"{own_before}/{total(None, batch)[1]}",
            f"{own_now}/{total(None, None)[1]}",
            count - before_count,
            count,
        )
    return digests


@dataclass(frozen=True, slots=True)
class BuildPlan:
    """What each schema of a build will be built from (`states`, recorded with its
    table), which of them are incremental (schema -> batch its table holds), and which
    are built whole before the increments (`first`; the others after them), how many
    new messages the increments add (what sizes their path, `pipeline.build.paths`), and
    the ids that joined the deleted sets the increments cascade from since their tables
    were written (`tables.grown_deletes`: builds of those schemas in other runs), whose
    rows the increments reduce again."""

    states: dict[str, BuildState]
    increments: dict[str, int]
    first: frozenset[str] = frozenset()
    new_messages: int = 0
    deleted_anew: frozenset[bytes] = frozenset()


def plan_builds(
    conn: psycopg.Connection,
    catalog: Catalog,
    order: BuildOrder,
    sums: LayerSums | None,
    batch: int,
    schema_ids: Sequence[str],
    built: Mapping[str, BuildState],
) -> BuildPlan:
    """The build plan of `schema_ids`, from the index that covers batches up to `batch`
    (`sums`: its `layer_sums`, None before the first entry); `built`: the build states
    their tables were written with (`tables.build_states`)."""
    if sums is None:
        return BuildPlan({}, {})
    previous = {s: built[s] for s in schema_ids if s in built}
    digests = message_digests(
        sums, {s: previous[s].batch if s in previous else -1 for s in schema_ids}
    )
    states = {
        s: BuildState(
            batch, digests[s].now, lens_key(catalog, order, s), cascade_sources(catalog, s)
        )
        for s in schema_ids
    }
    holding = tables.schemas_holding_messages(conn, list(previous))
    candidates = {
        s: was
        for s, was in previous.items()
        if was.lens == states[s].lens
        and was.digest == digests[s].before
        and s not in holding
        and digests[s].new <= NEW_SHARE * digests[s].total
        and tables.table_exists(conn, table_name_for(s))
    }
    grown = {
        s: tables.grown_deletes(conn, was, states[s].cascades_from) for s, was in candidates.items()
    }
    increments = {s: candidates[s].batch for s, ids in grown.items() if ids is not None}
    whole = set(schema_ids) - set(increments)
    last = cascading_from(catalog, whole, set(increments))
    for schema_id in cascading_from(catalog, increments, last):
        del increments[schema_id]
    new = sum(digests[s].new for s in increments)
    anew = frozenset(h for s in increments for h in grown[s] or ())
    return BuildPlan(states, increments, frozenset(whole - last), new, anew)


def only_grown(
    conn: psycopg.Connection,
    catalog: Catalog,
    order: BuildOrder,
    schema_ids: Sequence[str],
    layers: Sequence[str],
) -> list[str]:
    """Of `schema_ids` (in their order), those whose table a build brings up to date by
    an increment, as far as the kept sums of the index's `layers` tell without reading a
    message: built under the lens they have now, with messages of their own in batches
    after their table's. (`plan_builds` still decides: a fork or a gap found then builds
    whole.) None while a layer has no kept sums: only `layer_sums`' Spark job sums it."""
    kept = state_sql.layer_digests(conn, layers)
    if len(kept) < len(set(layers)):
        return []
    newest: dict[str, int] = {}
    for sums in kept.values():
        for schema, assigned, batch, _count, _bits in sums:
            if assigned and schema is not None:
                newest[schema] = max(newest.get(schema, -1), batch)
    built = tables.build_states(conn, schema_ids)
    return [
        s
        for s in schema_ids
        if s in built
        and s in catalog.histories
        and newest.get(s, -1) > built[s].batch
        and built[s].lens == lens_key(catalog, order, s)
    ]


def layers_after(conn: psycopg.Connection, layers: Sequence[str], batch: int) -> list[str]:
    """The `layers` that hold a message of a batch after `batch`, by their kept sums
    (`layer_sums` keeps them before a build plans): an increment's new messages are in
    the few newest layers, and reading only those spares a scan of the whole store. A
    layer without kept sums is read."""
    kept = state_sql.layer_digests(conn, layers)
    return [
        layer
        for layer in layers
        if layer not in kept or any(row_batch > batch for _, _, row_batch, _, _ in kept[layer])
    ]


def new_keys(messages: DataFrame | None, after_batch: int) -> set[bytes]:
    """The instances that messages of batches after `after_batch` create or name,
    anywhere in the store (a create elsewhere changes why an update naming it is
    rejected). `messages`: the store's, or those of its `layers_after` the batch."""
    if messages is None:
        return set()
    keys = expressions.project(messages, {"key": MESSAGE_KEY}, after(after_batch))
    rows = keys.where(F.col("key").isNotNull()).collect()
    # made distinct here: in Spark it is a shuffle, a job's worth on a small store
    return {bytes(row["key"]) for row in rows}


# Up to `literal_keys` (2,000) keys, rows are marked by a predicate of literals; above, by
# a join (each literal costs a call into the JVM), the keys broadcast up to
# `broadcast_keys` (200,000).


def among(frame: DataFrame, column: str, keys: set[bytes]) -> DataFrame:
    """The rows of `frame` whose binary `column` is one of `keys` (`marked`)."""
    return marked(frame, column, keys).filter("marked").drop("marked")


def marked(frame: DataFrame, column: str, keys: set[bytes]) -> DataFrame:
    """`frame` with `marked`: whether its binary `column` is one of `keys`. A few keys
    are a predicate, not a join with a frame made in the driver: Spark cannot size such
    a frame, so each join with one is a broadcast job of its own or a sort-merge join
    that shuffles `frame`, and on the sensors' one-entry runs that costs more than the
    data (bench/latency.py)."""
    settings = tuning()
    if len(keys) <= settings.literal_keys:
        return frame.withColumn("marked", F.coalesce(F.col(column).isin(list(keys)), F.lit(False)))
    wanted = local_frame(
        frame.sparkSession, [(k, True) for k in keys], f"`{column}` binary, marked boolean"
    )
    joined = frame.join(
        F.broadcast(wanted) if len(keys) <= settings.broadcast_keys else wanted, column, "left"
    )
    return joined.withColumn("marked", F.coalesce(F.col("marked"), F.lit(False)))


def touched_messages(
    decoded: DataFrame, increments: Mapping[str, int], keys: set[bytes]
) -> DataFrame:
    """The messages an incremental build reduces again: every message that creates or
    names one of `keys`, and the new messages that name no instance (their accounts).
    Each carries `built_batch` (a CASE on the schema: no join, as `marked`). One scan of
    the messages: at 1M, a scan for each of the two kinds cost ~1 s more."""
    built = F.lit(None).cast("long")
    for schema_id, batch in increments.items():
        built = F.when(F.col("schema") == schema_id, F.lit(batch)).otherwise(built)
    keyed = (
        decoded.filter(column(assigned_to(increments)))
        .withColumn("built_batch", built)
        .withColumn("key", column(MESSAGE_KEY))
    )
    touched = marked(keyed, "key", keys).filter(F.col("marked") | column(NEW_WITHOUT_KEY))
    return touched.drop("key", "marked")


def reached_rows(
    conn: psycopg.Connection, catalog: Catalog, schema_ids: Sequence[str], keys: set[bytes]
) -> set[bytes]:
    """The rows of the incremental schemas that point along a cascade field at one of
    `keys`, or at such a row, and so on: where deletes among them may reach."""
    fields = {
        s: [
            (name, catalog.histories[s].lens[name].type.is_array)
            for name, _ in cascade_fields(catalog.histories[s].lens, catalog.hash_index)
        ]
        for s in schema_ids
    }
    reached: set[bytes] = set()
    frontier = set(keys)
    while frontier:
        ids = sorted(k.hex() for k in frontier)
        found: set[bytes] = set()
        for schema_id in schema_ids:
            rows = tables.rows_pointing_at(conn, table_name_for(schema_id), fields[schema_id], ids)
            found |= {bytes.fromhex(r) for r in rows}
        frontier = found - reached - keys
        reached |= frontier
    return reached
