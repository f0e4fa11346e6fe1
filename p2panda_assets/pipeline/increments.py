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
- no message of it is held pending (a change anywhere in the catalog may release it),
- its lens has no cascade field (a delete upstream could reach rows no new message
  names), and its table is there,
- the new messages are at most half of its messages (else a whole build costs as much).

An instance's reduction depends on its own messages only (the ones that create it or
name it), so the build reduces again every message of each instance that a new message
names, and the new messages that name none; their rows, accounts and deleted ids then
replace the old ones (`store.tables.apply_increment`). Whatever is not incremental is
built whole, as before, after the incremental ones (it may cascade from them).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import psycopg
from pyspark.sql import Column, DataFrame, Row
from pyspark.sql import functions as F

from p2panda_assets.engine.cascade import cascade_fields
from p2panda_assets.engine.corpus import Catalog
from p2panda_assets.engine.relations import BuildOrder
from p2panda_assets.statuses import Assignment
from p2panda_assets.store import tables
from p2panda_assets.store.registry import table_name_for
from p2panda_assets.store.tables import BuildState

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


def _hash_bits() -> Column:
    """60 bits of the SHA-256 of an entry hash: summed, a digest that does not depend
    on order."""
    return F.conv(F.substring(F.sha2(F.col("hash"), 256), 1, 15), 16, 10).cast("decimal(38,0)")


def _sums(old: Column) -> list[Column]:
    bits = _hash_bits()
    return [
        F.sum(F.when(old, 1).otherwise(0)).alias("before_count"),
        F.sum(F.when(old, bits).otherwise(0)).alias("before_sum"),
        F.count("*").alias("count"),
        F.sum(bits).alias("sum"),
    ]


def message_digests(decoded: DataFrame, built: Mapping[str, int]) -> dict[str, Digest]:
    """The digests of the schemas `built` names (schema -> the batch its table was
    built up to, -1 for none): a count and a sum of bits of each entry hash, for the
    schema's messages and for every message of the store (two small Spark jobs)."""
    spark = decoded.sparkSession
    frame = spark.createDataFrame(list(built.items()), "schema string, built_batch long")
    assigned = decoded.filter(F.col("assignment") == Assignment.ASSIGNED.value)
    old = F.col("batch") <= F.col("built_batch")
    own = {
        r["schema"]: r
        for r in assigned.join(F.broadcast(frame), "schema")
        .groupBy("schema")
        .agg(*_sums(old))
        .collect()
    }
    batches = spark.createDataFrame([(b,) for b in set(built.values())], "built_batch long")
    store = {
        r["built_batch"]: r
        for r in decoded.select("hash", "batch")
        .crossJoin(F.broadcast(batches))
        .groupBy("built_batch")
        .agg(*_sums(old))
        .collect()
    }
    digests = {}
    for schema_id, batch in built.items():
        mine, every = own.get(schema_id), store.get(batch)
        count = 0 if mine is None else int(mine["count"])
        new = 0 if mine is None else count - int(mine["before_count"])
        digests[schema_id] = Digest(
            f"{_pair(mine, 'before_')}/{_pair(every, 'before_')}",
            f"{_pair(mine, '')}/{_pair(every, '')}",
            new,
            count,
        )
    return digests


def _pair(row: Row | None, prefix: str) -> str:
    if row is None:
        return "0:0"
    return f"{row[prefix + 'count']}:{row[prefix + 'sum'] or 0}"


@dataclass(frozen=True, slots=True)
class BuildPlan:
    """What each schema of a build will be built from (`states`, recorded with its
    table), and which of them are incremental (schema -> batch its table holds)."""

    states: dict[str, BuildState]
    increments: dict[str, int]


def plan_builds(
    conn: psycopg.Connection,
    catalog: Catalog,
    order: BuildOrder,
    decoded: DataFrame | None,
    batch: int,
    schema_ids: Sequence[str],
) -> BuildPlan:
    """The build plan of `schema_ids`, from the index that covers batches up to `batch`."""
    if decoded is None:
        return BuildPlan({}, {})
    previous = tables.build_states(conn, schema_ids)
    digests = message_digests(
        decoded, {s: previous[s].batch if s in previous else -1 for s in schema_ids}
    )
    states = {s: BuildState(batch, digests[s].now, lens_key(catalog, order, s)) for s in schema_ids}
    holding = tables.schemas_holding_messages(conn, list(previous))
    increments = {
        s: was.batch
        for s, was in previous.items()
        if was.lens == states[s].lens
        and was.digest == digests[s].before
        and s not in holding
        and not cascade_fields(catalog.histories[s].lens, catalog.hash_index)
        and digests[s].new <= NEW_SHARE * digests[s].total
        and tables.table_exists(conn, table_name_for(s))
    }
    return BuildPlan(states, increments)


def touched_messages(decoded: DataFrame, increments: Mapping[str, int]) -> DataFrame:
    """The messages an incremental build reduces again: every message of each instance
    that a message of a later batch than its table's creates or names, anywhere in the
    store (a create elsewhere changes why an update naming it is rejected), and the new
    messages that name no instance (their accounts). Each carries `built_batch`."""
    spark = decoded.sparkSession
    frame = spark.createDataFrame(list(increments.items()), "schema string, built_batch long")
    created = F.when(F.col("kind") == "create", F.col("hash"))
    key = F.coalesce(F.col("instance"), created)
    touched = (
        decoded.filter(F.col("batch") > min(increments.values()))
        .select(key.alias("key"))
        .where(F.col("key").isNotNull())
        .distinct()
    )
    keyed = (
        decoded.filter(F.col("assignment") == Assignment.ASSIGNED.value)
        .join(F.broadcast(frame), "schema")
        .withColumn("key", key)
    )
    new_without_key = keyed.filter((F.col("batch") > F.col("built_batch")) & F.col("key").isNull())
    return keyed.join(touched, "key", "left_semi").unionByName(new_without_key).drop("key")
