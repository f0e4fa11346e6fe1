"""The index step: new entries verified (once, `verify`), every log chained by the
engine's chain rules (`chaining`), the schema logs folded (`Catalog`), the instance
logs assigned to schemas (`log_plan`), and everything no schema build decides accounted
for. This module runs the step; the parts it runs are those modules.

The chained messages of every log are written to the columnar store as a layer
(`layers`), by the schema their log is assigned to: the reduction of any set of schemas
reads its partitions from there, and the decoded-messages check inspects them. Chaining
itself never carries a payload: it reads the entries and their message index, and the
accepted entries go from the verified batches to the chained layer directly
(`chaining.accepted_entries`). Only small things reach the driver: the chained schema
logs, which are folded from the store (`store.catalog.load_catalog`), and the totals of
the logs' plans; the logs are planned by author where they are (`log_plan.plan_author`).

Both kinds of step run one sequence (`sequence.IndexSteps.index`) and differ by what
they continue and how they commit (`sequence.Whole`, `sequence.Appended`). Most runs
*append* (`_append_index` decides whether they may): only the new batches are read, each
log they touch is continued from its tip (`protocol.log.LogTip`), only the logs of the
authors they touch are planned again (after a schema change, the decisions kept of the
others are checked by reference: `log_plan.changes_a_kept_plan`), and the new messages
are written as a layer on top of the chained runs before.
A run chains every log again, in one new run, when appending would not give what
chaining everything gives: a log that is not all accepted (a gap, a fork) or whose
schema is not settled gets a new entry, an entry lands at or before its log's tip, or
the decision on any log already indexed changes (a schema arrived or was registered);
and when that is cheaper: a small store, or over half of it new. At
`PipelineTuning.max_layers` layers, an appending step first merges the smallest layers
into one (`layer_merge`), never the first run: what it costs depends on what was
appended, not on the store.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial

import psycopg
from pyspark.sql import SparkSession

from p2panda_assets.engine.corpus import Catalog, LogKey
from p2panda_assets.pipeline.columnar.key_index import lacks_index
from p2panda_assets.pipeline.columnar.layers import keep_chained
from p2panda_assets.pipeline.columnar.warehouse import Warehouse
from p2panda_assets.pipeline.index.layer_merge import merge_small_layers
from p2panda_assets.pipeline.index.paths import (
    NO_ACCOUNTS,
    NO_PLANS,
    DriverIndexSteps,
    SparkIndexSteps,
    index_steps,
)
from p2panda_assets.pipeline.index.sequence import (
    Appended,
    IndexResult,
    StoredLog,
    Whole,
    stored_logs,
)
from p2panda_assets.pipeline.index.verify import (
    compact_verified,
    current_warehouse,
    verify_new_entries,
)
from p2panda_assets.pipeline.spark.jvm_failures import jvm_failures_explained
from p2panda_assets.pipeline.spark.session import sized_for_the_store
from p2panda_assets.pipeline.spark.watchdog import watched
from p2panda_assets.protocol.log import LogTip, anchors_for
from p2panda_assets.store import pipeline_state as state_sql
from p2panda_assets.store.catalog import registered_schemas, stored_catalog
from p2panda_assets.store.pipeline_lock import hold_pipeline_lock, release_pipeline_lock
from p2panda_assets.tuning import ENVIRONMENT, tuned, tuning


def run_index(spark: SparkSession, conn: psycopg.Connection, url: str) -> IndexResult:
    """The whole index step, under an advisory lock (concurrent runs wait, then find
    nothing left to verify). Its Spark work is bounded (`watchdog.watched`), and a JVM
    that runs out of heap under it is named (`jvm_failures`). One tuning holds for the
    whole step: the one in force when it started."""
    logs = partial(state_sql.count_entry_logs, conn)  # asked after an out-of-memory only
    with tuned(tuning()), watched(spark, holder=conn), jvm_failures_explained(spark, logs):
        hold_pipeline_lock(conn)
        try:
            verified = verify_new_entries(spark, conn, url)
            good = state_sql.count_good_entries(conn)
            with sized_for_the_store(spark, good):
                return _run_index(spark, conn, url, verified, good)
        finally:
            release_pipeline_lock(conn)


def last_index(spark: SparkSession, conn: psycopg.Connection) -> IndexResult:
    """The index as the last index step left it (no Spark job, nothing verified)."""
    state = state_sql.pipeline_state(conn)
    catalog = stored_catalog(conn)
    return IndexResult(
        0,
        state_sql.count_logs(conn),
        catalog,
        catalog.order(),
        current_warehouse(spark, conn),
        state.layers,
        state_sql.indexed_fingerprint(conn) or "",
        up_to_date=True,
        batch=state.batch,
    )


def _run_index(
    spark: SparkSession, conn: psycopg.Connection, url: str, verified: int, good: int
) -> IndexResult:
    warehouse = current_warehouse(spark, conn)
    fingerprint = state_sql.verified_fingerprint(conn)
    state = state_sql.pipeline_state(conn)
    if state_sql.indexed_fingerprint(conn) == fingerprint:
        return replace(last_index(spark, conn), verified=verified)
    if state.batch == 0:  # nothing verified yet: no log, no schema
        catalog = Catalog({}, {}, registered_schemas(conn))
        DriverIndexSteps(warehouse).commit(
            conn,
            url,
            NO_ACCOUNTS,
            NO_PLANS,
            None,
            lambda accounts, logs: state_sql.commit_index(
                conn, logs, accounts, None, fingerprint, 0
            ),
        )
        return IndexResult(verified, 0, catalog, catalog.order(), warehouse, (), fingerprint)
    result = _append_index(spark, conn, url, warehouse, state, fingerprint, good)
    if isinstance(result, str):  # chain every log again, into one new run
        why = result
        state = compact_verified(spark, conn, warehouse, state)
        whole = Whole(warehouse, state, fingerprint)
        result = index_steps(spark, warehouse, good).whole(conn, url, whole, good)
        result = replace(result, chained_all=why)
    keep_chained(spark, warehouse, {*result.layers, *state.layers})
    return replace(result, verified=verified)


# Appending stops when more than this share of the verified entries is new: the step
# chains everything into one run.
APPEND_SHARE = 0.5
# Below this many verified entries (`P2PANDA_APPEND_MIN_ENTRIES`) chaining everything is
# as fast as appending (bench/pipeline.py at 100k: 3.5 s either way), and every layer
# costs each later read of the chained messages a little (bench/latency.py on a small
# store: +1.3 s a run).
APPEND_MIN_ENV = ENVIRONMENT["append_min_entries"]


def _append_index(
    spark: SparkSession,
    conn: psycopg.Connection,
    url: str,
    warehouse: Warehouse,
    state: state_sql.PipelineState,
    fingerprint: str,
    good: int,
) -> IndexResult | str:
    """Continue the logs the new batches touch, from their tips, and write their new
    messages as one more layer; or why not, when only chaining every log again is exact
    (see the module's docstring), or cheaper. `good`: the verified entries of the store."""
    settings = tuning()
    since = state_sql.indexed_batch(conn)
    if since is None or not state.layers:
        return "no chained layer to append to"
    if since < state.compacted_through:  # the new batches' own directories are gone
        return "the new batches were compacted"
    if good < settings.append_min_entries:
        return f"a small store (under {settings.append_min_entries:,} verified entries)"
    if _first_run_unindexed(conn, warehouse, state):
        return "the first run has no key index (written by an earlier release)"
    steps = index_steps(spark, warehouse, None, since, state.batch)

    def appended(seqs: dict[LogKey, list[int]]) -> Appended | str:
        """The logs the new entries (their seq nums by log) touch, continued from their
        tips; or why not."""
        if sum(map(len, seqs.values())) > APPEND_SHARE * good:
            return "over half of the store is new"
        stored = stored_logs(conn, {author for author, _ in seqs})
        tips = _tips(steps, conn, warehouse, state.layers, stored, seqs)
        if isinstance(tips, str):
            return tips
        merged = merge_small_layers(spark, conn, warehouse, state, settings.max_layers)
        if merged is None:
            return f"{len(state.layers)} layers, which cannot be merged"
        return Appended(warehouse, merged, fingerprint, stored, tips)

    return steps.appended(conn, url, state, since, appended)


def _first_run_unindexed(
    conn: psycopg.Connection, warehouse: Warehouse, state: state_sql.PipelineState
) -> bool:
    """Whether the first run, which merges never rewrite, was written without a key
    index that it should have (`key_index.lacks_index`, and `key_index_messages` or
    more): chaining every log again, once, writes it in row groups with its index, so
    that increments stop reading every message of their schemas (about a minute at 1M
    entries). The layer's footers are kept a process, so a run asks the store for its
    size only when it has no index."""
    first = state.layers[0]
    if not lacks_index(warehouse.chained(first)):
        return False
    kept = state_sql.layer_digests(conn, [first]).get(first)
    return kept is not None and sum(row[3] for row in kept) >= tuning().key_index_messages


def _tips(
    steps: SparkIndexSteps | DriverIndexSteps,
    conn: psycopg.Connection,
    warehouse: Warehouse,
    layers: tuple[str, ...],
    stored: dict[LogKey, StoredLog],
    seqs: dict[LogKey, list[int]],
) -> dict[LogKey, LogTip] | str:
    """The tip of every indexed log the new entries touch, with the hashes they may link
    to; or why one of them cannot be continued.

    Each of those hashes is an accepted entry's (the log is clean up to its tip), and
    the entry store keeps every entry: where it holds one entry at a position, that is
    the one (`store.pipeline_state.stored_hashes_at`, a probe of an index each). Only
    where it holds several (a forged or refused entry at the same seq) are the chained
    layers read for the accepted one: a scan of every message of the store, 1.2 s at
    1M entries."""
    needed: dict[LogKey, tuple[StoredLog, set[int]]] = {}
    for key, new_seqs in seqs.items():
        old = stored.get(key)
        if old is None:
            continue  # a new log: chained from its start
        if not (old.clean and old.tip_seq is not None and old.summary.settled):
            return "a log with a gap, a fork or no settled schema gets an entry"
        if min(new_seqs) <= old.tip_seq:
            return "an entry lands at or before its log's tip"
        needed[key] = (old, anchors_for(old.tip_seq, new_seqs))
    wanted = [(author, log_id, n) for (author, log_id), (_, ns) in needed.items() for n in ns]
    hashes: dict[LogKey, dict[int, bytes]] = {}
    unsure: list[state_sql.LogPosition] = []
    for (author, log_id, seq), found in state_sql.stored_hashes_at(conn, wanted).items():
        if len(found) == 1:
            hashes.setdefault((author, log_id), {})[seq] = found[0]
        else:
            unsure.append((author, log_id, seq))
    roots = [warehouse.chained(run) for run in layers]
    accepted_at = steps.accepted_at(roots, unsure) if unsure else []
    for (author, log_id, seq), entry_hash in accepted_at:
        hashes.setdefault((author, log_id), {})[seq] = entry_hash
    tips: dict[LogKey, LogTip] = {}
    for key, (old, anchored) in needed.items():
        found_hashes = hashes.get(key, {})
        if set(found_hashes) != anchored:
            return "the layers lack an entry a new one links to"
        assert old.tip_seq is not None
        tips[key] = LogTip(old.tip_seq, old.tip_ended, found_hashes)
    return tips
