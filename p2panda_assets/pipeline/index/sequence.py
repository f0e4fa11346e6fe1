"""The index step's one sequence, on either path (issue 55): `IndexSteps` is what a path
implements (`pipeline.index.paths`: Spark frames or Arrow tables), and its `whole` and
`appended` methods run the same sequence over them: chain, fold the schema logs, plan
every log, write the accepted messages as a layer, account, commit. Whole and appended
steps differ by what they continue and how they commit (`Whole`, `Appended`), not by a
copy of the sequence.

`IndexSteps` is generic over the path's frame type: the handles one step passes the next
are typed on each path, and since the sequence is a method, a call on either path
(`index_steps` gives one of two) needs no `Any` to type-check."""

from __future__ import annotations

import secrets
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Generic, TypeVar, cast

import psycopg
from pyspark.sql import DataFrame, SparkSession

from p2panda_assets.engine.corpus import Catalog, LogKey, LogSummary
from p2panda_assets.engine.relations import BuildOrder
from p2panda_assets.failpoints import Failpoint, failpoint
from p2panda_assets.pipeline.columnar.key_index import index_layer
from p2panda_assets.pipeline.columnar.layers import keep_layer_sums, read_layers
from p2panda_assets.pipeline.columnar.warehouse import Warehouse
from p2panda_assets.pipeline.index.accounts import schema_account_rows
from p2panda_assets.pipeline.index.log_plan import STORED, PlanTotals, changes_a_kept_plan
from p2panda_assets.pipeline.kernels.batches import Row
from p2panda_assets.pipeline.kernels.chain import ref_columns, ref_from_columns
from p2panda_assets.pipeline.spark.jvm_failures import cleaned_up
from p2panda_assets.protocol.log import LogTip
from p2panda_assets.statuses import BuildPath
from p2panda_assets.store import pipeline_state as state_sql
from p2panda_assets.store.catalog import load_catalog, registered_schemas, schema_logs
from p2panda_assets.store.staging import Stage, drop_tables, stage_table

FrameT = TypeVar("FrameT")  # a path's frames: Spark's DataFrame, or an Arrow table
LogPosition = tuple[bytes, int, int]
CATALOG_CHANGED = "what was decided of an indexed log changes (a schema arrived or was registered)"


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


@dataclass(frozen=True, slots=True)
class Whole:
    """An index step that chains every log from its start and writes one new run."""

    warehouse: Warehouse
    state: state_sql.PipelineState
    fingerprint: str
    stored: Mapping[LogKey, StoredLog] = field(default_factory=dict)  # nothing to continue
    tips: Mapping[LogKey, LogTip] = field(default_factory=dict)

    def writes(self, totals: PlanTotals) -> bool:
        """Whether the step writes a layer: a whole step always writes its run."""
        return True

    def layers(self, run: str | None) -> tuple[str, ...]:
        assert run is not None  # a whole step always writes its run
        return (run,)

    def commit(self, conn: psycopg.Connection, run: str | None) -> Callable[[Stage, Stage], None]:
        """How the step commits its staged accounts and logs rows."""
        assert run is not None
        return lambda accounts, logs: state_sql.commit_index(
            conn, logs, accounts, run, self.fingerprint, self.state.batch
        )


@dataclass(frozen=True, slots=True)
class Appended(Whole):
    """An index step that continues the logs the new batches touch from their tips
    (`tips`) and adds a layer on top of the store's (none if no log grew). `stored`:
    what was decided of every log of the authors the new entries touch."""

    def writes(self, totals: PlanTotals) -> bool:
        """No layer without a message to hold: only if the chain accepted a new entry
        (some log's tip moved). A registration alone brings none, and so do new entries
        the chain rules all reject or hold: a layer of no message would have no file,
        and reading the layers would fail."""
        return totals.grew

    def layers(self, run: str | None) -> tuple[str, ...]:
        return self.state.layers if run is None else (*self.state.layers, run)

    def commit(self, conn: psycopg.Connection, run: str | None) -> Callable[[Stage, Stage], None]:
        layers = self.layers(run)
        return lambda accounts, logs: state_sql.commit_appended(
            conn, logs, accounts, layers[1:], self.fingerprint, self.state.batch
        )


@dataclass(frozen=True, slots=True)
class StoredLog:
    """A logs row: what the last index step decided of the log, and where it stood."""

    summary: LogSummary
    decided: tuple[object, ...]  # schema, assignment, why_reason, why_message
    tip_seq: int | None  # None: indexed by a release that did not record it
    tip_ended: bool
    clean: bool


def _changes_a_kept_plan(
    conn: psycopg.Connection,
    how: Whole,
    found: Mapping[LogKey, bool],
    catalog: Catalog,
    order: BuildOrder,
) -> bool:
    """Whether appending would change what was decided of a log the new entries do not
    touch: only if the catalog may differ from the last step's (a schema log has new
    entries, or the schemas registered changed), and then by the decisions the logs
    table keeps, summed up by reference (`log_plan.changes_a_kept_plan`). Otherwise a
    log's plan depends on its author's other logs alone (`Catalog.assign`), and an
    append plans the logs of the authors it touches, not a row per log of the store.
    `found`: the chained logs that are schema logs by their new entries or by what was
    decided of them (`IndexSteps.schema_logs`)."""
    if not isinstance(how, Appended):
        return False
    if found or state_sql.registered_since_indexed(conn, how.fingerprint):
        return changes_a_kept_plan(state_sql.kept_plans(conn), catalog, order)
    return False


def stored_logs(conn: psycopg.Connection, authors: Collection[bytes]) -> dict[LogKey, StoredLog]:
    """What was decided of every log of `authors`."""
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


def stored_rows(stored: Mapping[LogKey, StoredLog]) -> list[Row]:
    """What was decided of these logs, as `log_plan.plan_author` reads a kept logs row."""
    rows: list[Row] = []
    for (author, log_id), log in stored.items():
        ref_id, ref_version, ref_hash = ref_columns(log.summary.first_ref)
        schema_id, assignment, why_reason, why_message = log.decided
        rows.append(
            {
                "row_type": STORED,
                "author": author,
                "log_id": log_id,
                "is_schema": log.summary.is_schema,
                "ref_schema_id": ref_id,
                "ref_version": ref_version,
                "ref_hash": ref_hash,
                "schema_id": schema_id,
                "assignment": assignment,
                "why_reason": why_reason,
                "why_message": why_message,
                "tip_seq": log.tip_seq,
                "tip_ended": log.tip_ended,
                "clean": log.clean,
            }
        )
    return rows


class IndexSteps(ABC, Generic[FrameT]):
    """What the index step does with its entries, on one path (`pipeline.index.paths`),
    and the sequence it runs them in (`whole`, `appended`)."""

    path: BuildPath

    @abstractmethod
    def verified(self, state: state_sql.PipelineState, since: int | None = None) -> FrameT:
        """The good verified entries: all, or those of the batches after `since`."""

    @abstractmethod
    def rows(self, verified: FrameT, entries: int | None = None) -> list[Row] | None:
        """What the chain step reads of `verified` (of `entries` entries, if known), in
        the driver; None if too many for the driver to chain."""

    @abstractmethod
    def seqs(self, verified: FrameT) -> dict[LogKey, list[int]]:
        """The seq nums of `verified`'s entries by log (when `rows` gave None)."""

    @abstractmethod
    def chain(self, verified: FrameT, rows: list[Row] | None, tips: dict[LogKey, LogTip]) -> FrameT:
        """Every log of `verified` (its `rows`, if held) through the chain rules, each
        continued from its tip in `tips`: a row per log and per entry refused or held."""

    @abstractmethod
    def schema_logs(self, chained: FrameT, kept: set[LogKey]) -> dict[LogKey, bool]:
        """The chained logs that are schema logs by their new entries, or that `kept`
        names (schema logs by what was decided of them): whether each is one by its new
        entries. A few rows: the schema logs the step chained."""

    @abstractmethod
    def plan(
        self, chained: FrameT, stored: list[Row], catalog: Catalog, order: BuildOrder
    ) -> FrameT:
        """The plans of the chained logs' authors' logs (`log_plan.plan_author`, by
        author), with what was decided of those of them `stored` holds."""

    @abstractmethod
    def totals(self, planned: FrameT) -> PlanTotals:
        """What the sequence needs of the `planned` logs (`log_plan.PlanTotals`)."""

    @abstractmethod
    def accepted(self, verified: FrameT, chained: FrameT, held: int) -> FrameT:
        """The entries of `verified` the chain rules accepted (`held`: how many not)."""

    @abstractmethod
    def write(self, accepted: FrameT, planned: FrameT, totals: PlanTotals, few: bool) -> str:
        """The accepted entries as a new chained run of the warehouse, each by its log's
        plan in `planned` (`totals`: theirs); its name."""

    @abstractmethod
    def merge(self, layers: Sequence[str]) -> str:
        """The messages of the chained `layers` (their roots) as one new chained run of
        the warehouse, by the same `schema=` partitions; its name."""

    @abstractmethod
    def accounts(
        self, chained: FrameT, pending: FrameT | None, schema_rows: list[tuple[object, ...]]
    ) -> FrameT:
        """The index accounts (`ACCOUNT_TARGET_COLUMNS`): the chain rules', `schema_rows`
        (`accounts.schema_account_rows`), and `pending`'s."""

    @abstractmethod
    def pending(self, accepted: FrameT, planned: FrameT, waiting: int) -> FrameT:
        """The accounts of the accepted entries of the `waiting` logs of `planned` the
        index accounts for (`log_plan.waits`, `pipeline.index.accounts.pending_group`)."""

    @abstractmethod
    def copy_accounts(self, accounts: FrameT, url: str, stage: Stage) -> None:
        """`accounts` into the staging table `stage`."""

    @abstractmethod
    def copy_logs(self, planned: FrameT, url: str, stage: Stage) -> None:
        """The logs rows (`store.logs.LOG_COLUMNS`) of the logs the step chained, of
        `planned`, into the staging table `stage`."""

    @abstractmethod
    def accepted_at(
        self, layers: Sequence[str], positions: list[LogPosition]
    ) -> list[tuple[LogPosition, bytes]]:
        """The hash of the accepted entry at each position the chained `layers` hold."""

    @abstractmethod
    def remove_run(self, run: str) -> None:
        """Remove the chained run `run` (one this step wrote and did not commit)."""

    @abstractmethod
    def release(self, frame: FrameT) -> None:
        """Let go of what `chain` or `plan` kept (Spark's persisted rows)."""

    def whole(self, conn: psycopg.Connection, url: str, how: Whole, entries: int) -> IndexResult:
        """Chain every log of the store's `entries` good entries again, into one run."""
        every = self.verified(how.state)
        result = self.index(conn, url, how, every, self.rows(every, entries))
        assert not isinstance(result, str)  # nothing indexed before to contradict
        return result

    def appended(
        self,
        conn: psycopg.Connection,
        url: str,
        state: state_sql.PipelineState,
        since: int,
        how: Callable[[dict[LogKey, list[int]]], Appended | str],
    ) -> IndexResult | str:
        """Continue the logs that the entries of the batches after `since` touch; `how`
        continues them, given their seq nums by log, or says why not."""
        new = self.verified(state, since)
        held = self.rows(new)
        seqs: dict[LogKey, list[int]] = {}
        if held is not None:
            for entry in held:
                key = (cast(bytes, entry["author"]), cast(int, entry["log_id"]))
                seqs.setdefault(key, []).append(cast(int, entry["seq"]))
        else:
            seqs = self.seqs(new)
        appended = how(seqs)
        if isinstance(appended, str):
            return appended
        return self.index(conn, url, appended, new, held)

    def index(
        self,
        conn: psycopg.Connection,
        url: str,
        how: Whole,
        new: FrameT,
        held: list[Row] | None,
    ) -> IndexResult | str:
        """The index step's one sequence, whole or appended (`how`): chain the `new`
        verified entries (from the logs' tips when appending), fold the schema logs, plan
        the logs by author (`log_plan.plan_author`), write the accepted messages as a
        layer, and commit the logs, the accounts and the layers in one transaction. Why
        not, when appending would change what the index decided of a log already indexed:
        only chaining every log again is exact then. `held`: the new entries as rows, if
        the driver holds them. Nothing here holds a row per chained log: the plans stay
        on the path, and the sequence reads their `PlanTotals`."""
        chained = self.chain(new, held, dict(how.tips))
        kept = [chained]  # what the step persisted, released at its end
        with cleaned_up(lambda: [self.release(frame) for frame in kept]):
            kept_schemas = {key for key, old in how.stored.items() if old.summary.is_schema}
            found = self.schema_logs(chained, kept_schemas)
            schema_keys = kept_schemas | {
                k for k, is_schema in found.items() if is_schema and k not in how.stored
            }
            if isinstance(how, Appended):
                schema_keys.update(schema_logs(conn))  # the same catalog as the last step's
            catalog = load_catalog(conn, sorted(schema_keys), registered_schemas(conn))
            order = catalog.order()
            if _changes_a_kept_plan(conn, how, found, catalog, order):
                return CATALOG_CHANGED
            planned = self.plan(chained, stored_rows(how.stored), catalog, order)
            kept.append(planned)
            totals = self.totals(planned)
            if totals.changed:
                return CATALOG_CHANGED
            accepted = self.accepted(new, chained, totals.held)
            run: str | None = None
            if how.writes(totals):
                run = self.write(accepted, planned, totals, held is not None)
                index_layer(how.warehouse.chained(run))
            layers = how.layers(run)
            pending = self.pending(accepted, planned, totals.waiting) if totals.waiting else None
            accounts = self.accounts(chained, pending, schema_account_rows(catalog))
            self.commit(conn, url, accounts, planned, run, how.commit(conn, run))
            if run is not None:
                keep_layer_sums(conn, run, layers, totals.sums)
        return IndexResult(
            0,
            state_sql.count_logs(conn) if isinstance(how, Appended) else totals.logs,
            catalog,
            order,
            how.warehouse,
            layers,
            how.fingerprint,
            batch=how.state.batch,
            path=self.path,
        )

    def commit(
        self,
        conn: psycopg.Connection,
        url: str,
        accounts: FrameT,
        planned: FrameT,
        run: str | None,
        settle: Callable[[Stage, Stage], None],
    ) -> None:
        """Stage the index accounts and the chained logs' rows, then `settle` them with the
        rest of the step in one transaction; on any failure, drop the stages and the
        chained run this step wrote."""
        token = secrets.token_hex(6)
        stages = [stage_table(conn, "accounts", token), stage_table(conn, "logs", token)]
        try:
            self.copy_accounts(accounts, url, stages[0])
            self.copy_logs(planned, url, stages[1])
            failpoint(Failpoint.INDEXED)
            settle(stages[0], stages[1])
        except BaseException:
            drop_tables(conn, stages)
            if run is not None:
                self.remove_run(run)
            raise
