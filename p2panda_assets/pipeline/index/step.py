"""The index step: new entries verified (once, `verify`), every log chained by the
engine's chain rules (`chaining`), the schema logs folded (`Catalog`), the instance
logs assigned to schemas (`log_plan`), and everything no schema build decides accounted
for. This module runs the step; the parts it runs are those modules.

The chained messages of every log are written to the columnar store as a layer
(`layers`), by the schema their log is assigned to: the reduction of any set of schemas
reads its partitions from there, and the decoded-messages check inspects them. Chaining
itself never carries a payload: it reads the entries and their message index, and the
accepted entries go from the verified batches to the chained layer directly
(`chaining.accepted_entries`). Only small things reach the driver: one summary per log;
the schema logs are folded from the store (`store.catalog.load_catalog`).

Both kinds of step run one sequence (`_index`) and differ by what they continue and how
they commit (`Whole`, `Appended`). Most runs *append* (`_append_index` decides whether they
may): only the new batches are read, each log they touch is continued from its tip
(`protocol.log.LogTip`), only the logs of the authors they touch are planned again
(`_every_log_when_the_catalog_may_change` says when all are), and the new messages are
written as a layer on top of the chained runs before. A run chains every log again, in
one new run, when appending would not give what chaining everything gives: a log that is
not all accepted (a gap, a fork) or whose schema is not settled gets a new entry, an
entry lands at or before its log's tip, or the decision on any log already indexed
changes (a schema arrived or was registered); and when that is cheaper: a small store, or
over half of it new. At `PipelineTuning.max_layers` layers, an appending step first
merges the smallest layers into one (`layer_merge`), never the first run: what it costs
depends on what was appended, not on the store.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal
from functools import partial
from typing import cast

import psycopg
from pyspark.sql import DataFrame, SparkSession

from p2panda_assets.engine.corpus import (
    Catalog,
    LogKey,
    LogSummary,
)
from p2panda_assets.engine.relations import BuildOrder
from p2panda_assets.failpoints import Failpoint, failpoint
from p2panda_assets.pipeline.columnar.layers import keep_chained, keep_layer_sums, read_layers
from p2panda_assets.pipeline.columnar.warehouse import Warehouse
from p2panda_assets.pipeline.index.accounts import schema_account_rows, waiting_logs
from p2panda_assets.pipeline.index.layer_merge import merge_small_layers
from p2panda_assets.pipeline.index.log_plan import (
    LogPlan,
    decided_columns,
    log_rows_with_tips,
    plan_logs,
)
from p2panda_assets.pipeline.index.paths import DriverIndexSteps, Frame, IndexSteps, index_steps
from p2panda_assets.pipeline.index.verify import (
    compact_verified,
    current_warehouse,
    verify_new_entries,
)
from p2panda_assets.pipeline.kernels.batches import Row
from p2panda_assets.pipeline.kernels.chain import ChainedLogs, ref_from_columns
from p2panda_assets.pipeline.spark.jvm_failures import jvm_failures_explained
from p2panda_assets.pipeline.spark.session import sized_for_the_store
from p2panda_assets.pipeline.spark.watchdog import watched
from p2panda_assets.protocol.log import LogTip, anchors_for
from p2panda_assets.statuses import BuildPath
from p2panda_assets.store import pipeline_state as state_sql
from p2panda_assets.store.catalog import (
    load_catalog,
    registered_schemas,
    schema_logs,
    stored_catalog,
)
from p2panda_assets.store.pipeline_lock import hold_pipeline_lock, release_pipeline_lock
from p2panda_assets.store.staging import Stage, drop_tables, stage_table
from p2panda_assets.tuning import ENVIRONMENT, tuned, tuning


@dataclass(frozen=True, slots=True)
class IndexResult:
    verified: int
    logs: int
    catalog: Catalog
    order: BuildOrder
    warehouse: Warehouse
    layers: tuple[str, ...]  # the chained runs holding the store's messages, oldest first
    fingerprint: str  # what the index was computed from
    up_to_date: bool = False  # nothing changed since the last index step
    batch: int = 0  # the newest verified batch the chained messages hold
    path: BuildPath | None = None  # where the step ran; None: nothing to index
    chained_all: str | None = None  # why the step chained every log again; None: it did not

    def decoded(self, spark: SparkSession) -> DataFrame | None:
        """Every chained message of the store (None before the first entry)."""
        return read_layers(spark, [self.warehouse.chained(run) for run in self.layers])


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
        _commit(
            conn,
            url,
            DriverIndexSteps(warehouse),
            [],
            None,
            lambda stage: state_sql.commit_index(conn, [], stage, None, fingerprint, 0),
        )
        return IndexResult(verified, 0, catalog, catalog.order(), warehouse, (), fingerprint)
    result = _append_index(spark, conn, url, warehouse, state, fingerprint, good)
    if isinstance(result, str):  # chain every log again, into one new run
        why = result
        state = compact_verified(spark, conn, warehouse, state)
        steps = index_steps(spark, warehouse, good)
        every = steps.verified(state)
        held = steps.rows(every, good)
        whole = _index(conn, url, steps, Whole(warehouse, state, fingerprint), every, held)
        assert not isinstance(whole, str)  # nothing indexed before to contradict
        result = replace(whole, chained_all=why)
    keep_chained(spark, warehouse, {*result.layers, *state.layers})
    return replace(result, verified=verified)


@dataclass(frozen=True, slots=True)
class Whole:
    """An index step that chains every log from its start and writes one new run."""

    warehouse: Warehouse
    state: state_sql.PipelineState
    fingerprint: str
    stored: Mapping[LogKey, StoredLog] = field(default_factory=dict)  # nothing to continue
    tips: Mapping[LogKey, LogTip] = field(default_factory=dict)

    def writes(self, logs: Mapping[LogKey, tuple[LogSummary, tuple[object, ...]]]) -> bool:
        """Whether the step writes a layer: a whole step always writes its run."""
        return True

    def layers(self, run: str | None) -> tuple[str, ...]:
        assert run is not None  # a whole step always writes its run
        return (run,)

    def commit(
        self, conn: psycopg.Connection, rows: list[tuple[object, ...]], run: str | None
    ) -> Callable[[Stage], None]:
        assert run is not None
        return lambda stage: state_sql.commit_index(
            conn, rows, stage, run, self.fingerprint, self.state.batch
        )


@dataclass(frozen=True, slots=True)
class Appended(Whole):
    """An index step that continues the logs the new batches touch from their tips
    (`tips`) and adds a layer on top of the store's (none if no log grew). `stored`:
    what was decided of every log of the authors the new entries touch; of every log
    of the store once `everyone` (`_every_log_when_the_catalog_may_change`)."""

    everyone: bool = False

    def writes(self, logs: Mapping[LogKey, tuple[LogSummary, tuple[object, ...]]]) -> bool:
        """No layer without a message to hold (`_grew`)."""
        return _grew(logs, self.stored)

    def layers(self, run: str | None) -> tuple[str, ...]:
        return self.state.layers if run is None else (*self.state.layers, run)

    def commit(
        self, conn: psycopg.Connection, rows: list[tuple[object, ...]], run: str | None
    ) -> Callable[[Stage], None]:
        layers = self.layers(run)
        return lambda stage: state_sql.commit_appended(
            conn, rows, stage, layers[1:], self.fingerprint, self.state.batch
        )


def _index(
    conn: psycopg.Connection,
    url: str,
    steps: IndexSteps,
    how: Whole,
    new: Frame,
    held: list[Row] | None,
) -> IndexResult | str:
    """The index step's one sequence, whole or appended (`how`): chain the `new`
    verified entries (from the logs' tips when appending), fold the schema logs, plan
    every log, write the accepted messages as a layer, and commit the logs, the accounts
    and the layers in one transaction. Why not, when appending would change what the
    index decided of a log already indexed: only chaining every log again is exact then.
    `held`: the new entries as rows, if the driver holds them."""
    chained = steps.chain(new, held, dict(how.tips))
    try:
        found = steps.found(chained)
        how = _every_log_when_the_catalog_may_change(conn, how, found)
        logs: dict[LogKey, tuple[LogSummary, tuple[object, ...]]] = {}
        for key, (summary, tip) in found.logs.items():
            before = how.stored.get(key)
            logs[key] = (summary if before is None else before.summary, tip)
        summaries = {key: old.summary for key, old in how.stored.items()}
        summaries.update({key: summary for key, (summary, _) in logs.items()})
        schema_keys = {key for key, summary in summaries.items() if summary.is_schema}
        if isinstance(how, Appended) and not how.everyone:
            schema_keys.update(schema_logs(conn))  # the same catalog as the last step's
        catalog = load_catalog(conn, sorted(schema_keys), registered_schemas(conn))
        order = catalog.order()
        plan = plan_logs(summaries, catalog, order)
        if any(decided_columns(plan[key]) != old.decided for key, old in how.stored.items()):
            return "what was decided of an indexed log changes (a schema arrived or was registered)"
        accepted = steps.accepted(new, chained, found.held)
        run: str | None = None
        if how.writes(logs):
            run = steps.write(accepted, plan, found.unexplained, held is not None)
        layers = how.layers(run)
        accounts = _index_accounts(steps, chained, accepted, catalog, plan)
        log_rows = log_rows_with_tips(logs, plan)
        _commit(conn, url, steps, accounts, run, how.commit(conn, log_rows, run))
        if run is not None:
            keep_layer_sums(conn, run, layers, plan, found.sums)
    finally:
        steps.release(chained)
    everyone = not isinstance(how, Appended) or how.everyone
    return IndexResult(
        0,
        len(summaries) if everyone else state_sql.count_logs(conn),
        catalog,
        order,
        how.warehouse,
        layers,
        how.fingerprint,
        batch=how.state.batch,
        path=steps.path,
    )


# Appending stops when more than this share of the verified entries is new: the step
# chains everything into one run.
APPEND_SHARE = 0.5
# Below this many verified entries (`P2PANDA_APPEND_MIN_ENTRIES`) chaining everything is
# as fast as appending (bench/pipeline.py at 100k: 3.5 s either way), and every layer
# costs each later read of the chained messages a little (bench/latency.py on a small
# store: +1.3 s a run).
APPEND_MIN_ENV = ENVIRONMENT["append_min_entries"]


@dataclass(frozen=True, slots=True)
class StoredLog:
    """A logs row: what the last index step decided of the log, and where it stood."""

    summary: LogSummary
    decided: tuple[object, ...]  # schema, assignment, why_reason, why_message
    tip_seq: int | None  # None: indexed by a release that did not record it
    tip_ended: bool
    clean: bool


def _every_log_when_the_catalog_may_change(
    conn: psycopg.Connection, how: Whole, found: ChainedLogs
) -> Whole:
    """`how`, holding what was decided of every log of the store if the catalog may
    differ from the last step's: a schema log has new entries, or the schemas registered
    changed. Only then can what was decided of a log the new entries do not touch
    change; otherwise a log's plan depends on the catalog and on its author's other
    logs alone (`Catalog.assign`), and an append reads the logs of the authors it
    touches, not a row per log of the store."""
    if not isinstance(how, Appended) or how.everyone:
        return how
    schema_log_grew = any(summary.is_schema for summary, _ in found.logs.values()) or any(
        how.stored[key].summary.is_schema for key in found.logs if key in how.stored
    )
    if schema_log_grew or state_sql.registered_since_indexed(conn, how.fingerprint):
        return replace(how, stored=_stored_logs(conn), everyone=True)
    return how


def _stored_logs(
    conn: psycopg.Connection, authors: Collection[bytes] | None = None
) -> dict[LogKey, StoredLog]:
    """What was decided of every log (of `authors`' logs, if given)."""
    logs: dict[LogKey, StoredLog] = {}
    for row in state_sql.stored_logs(conn, authors):
        author, log_id, is_schema, ref_id, ref_version, ref_hash = row[:6]
        ref = ref_from_columns(
            cast(str | None, ref_id),
            cast(Decimal | None, ref_version),
            cast(bytes | None, ref_hash),
        )
        tip_seq, tip_ended, clean = row[10:13]
        logs[(bytes(cast(bytes, author)), int(cast(Decimal, log_id)))] = StoredLog(
            LogSummary(bool(is_schema), ref),
            tuple(row[6:10]),
            None if tip_seq is None else int(cast(Decimal, tip_seq)),
            bool(tip_ended),
            bool(clean),
        )
    return logs


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
    steps = index_steps(spark, warehouse, None, since, state.batch)
    new = steps.verified(state, since)
    held = steps.rows(new)
    seqs: dict[LogKey, list[int]] = {}
    if held is not None:
        for entry in held:
            key = (cast(bytes, entry["author"]), cast(int, entry["log_id"]))
            seqs.setdefault(key, []).append(cast(int, entry["seq"]))
    else:
        seqs = steps.seqs(new)
    new_entries = sum(map(len, seqs.values()))
    if new_entries > APPEND_SHARE * good:
        return "over half of the store is new"
    stored = _stored_logs(conn, {author for author, _ in seqs})
    tips = _tips(steps, conn, warehouse, state.layers, stored, seqs)
    if isinstance(tips, str):
        return tips
    merged = merge_small_layers(spark, conn, warehouse, state, settings.max_layers)
    if merged is None:
        return f"{len(state.layers)} layers, which cannot be merged"
    how = Appended(warehouse, merged, fingerprint, stored, tips)
    return _index(conn, url, steps, how, new, held)


def _grew(
    logs: Mapping[LogKey, tuple[LogSummary, tuple[object, ...]]],
    stored: Mapping[LogKey, StoredLog],
) -> bool:
    """Whether the chain accepted a new entry: some log's tip moved. A registration
    alone brings none, and so do new entries the chain rules all reject or hold: a
    layer of no message would have no file, and reading the layers would fail."""
    for key, (_, (tip_seq, _, _)) in logs.items():
        before = stored.get(key)
        if int(cast(Decimal, tip_seq)) > (before.tip_seq or 0 if before else 0):
            return True
    return False


def _tips(
    steps: IndexSteps,
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


def _index_accounts(
    steps: IndexSteps, chained: Frame, accepted: Frame, catalog: Catalog, plan: LogPlan
) -> Frame:
    """The accounts the index decides: chain rules, schema log entries, and the logs no
    schema build will reduce (their schema cannot be determined, is not built, or the
    author has a lower log for it)."""
    pending = steps.pending(accepted, waiting_logs(plan))
    return steps.accounts(chained, pending, schema_account_rows(catalog))


def _commit(
    conn: psycopg.Connection,
    url: str,
    steps: IndexSteps,
    accounts: Frame,
    run: str | None,
    settle: Callable[[Stage], None],
) -> None:
    """Stage the index accounts, then `settle` them with the rest of the step in one
    transaction; on any failure, drop the stage and the chained run this step wrote."""
    stage = stage_table(conn, "accounts", secrets.token_hex(6))
    try:
        steps.copy_accounts(accounts, url, stage)
        failpoint(Failpoint.INDEXED)
        settle(stage)
    except BaseException:
        drop_tables(conn, [stage])
        if run is not None:
            steps.remove_run(run)
        raise
