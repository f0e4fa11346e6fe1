"""Each log's plan, as the index step decides it and the logs table keeps it: the
schema its messages go with, its assignment, and why its entries wait, if they do
(`plan_logs`).

A log's plan depends on the catalog and on its author's other logs alone
(`Catalog.assign`), so both paths plan an author's logs at a time (`plan_author`): the
driver path over the rows it holds (`plan_locally`), Spark's in its driver for a few
logs (`PipelineTuning.collect_plan_logs`) and in tasks grouped by author above. No path
holds a row per log of the store in the process that runs the step (issue 58): what the
sequence needs of the plans is summed up by `PlanTotals`."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import astuple, dataclass, field, replace
from functools import partial
from typing import cast

import pyarrow as pa

from p2panda_assets.engine.corpus import Catalog, LogKey, LogSummary, schema_id_of
from p2panda_assets.engine.relations import BuildOrder
from p2panda_assets.errors import Pending
from p2panda_assets.pipeline.columnar.warehouse import NO_SCHEMA
from p2panda_assets.pipeline.kernels.batches import (
    Row,
    arrow_schema,
    map_groups_locally,
    python_rows,
)
from p2panda_assets.pipeline.kernels.chain import ref_columns, ref_from_columns
from p2panda_assets.pipeline.kernels.declared import PLANNED_WAITING, evaluated
from p2panda_assets.pipeline.kernels.digests import merged_sums, sums_of_layer
from p2panda_assets.statuses import Assignment as LogAssignment
from p2panda_assets.store.logs import LOG_COLUMNS
from p2panda_assets.store.pipeline_state import LayerSums

# (schema the log's messages go with, or NO_SCHEMA; its assignment; why its entries wait:
# a pending log, or one assigned to a schema that is not built)
LogPlan = dict[LogKey, tuple[str, LogAssignment, Pending | None]]


def plan_logs(summaries: dict[LogKey, LogSummary], catalog: Catalog, order: BuildOrder) -> LogPlan:
    """Every log's plan, from the catalog's assignment of the instance logs: one assigned
    to a schema that is not built waits, for the reason the catalog gives."""
    assignment = catalog.assign(summaries)
    built = set(order.order)
    plan: LogPlan = {}
    for key, summary in summaries.items():
        if summary.is_schema:
            plan[key] = (schema_id_of(key), LogAssignment.SCHEMA, None)
        elif key in assignment.schema_of:
            schema = assignment.schema_of[key]
            why = None if schema in built else catalog.not_built(schema, order)
            plan[key] = (schema, LogAssignment.ASSIGNED, why)
        elif key in assignment.duplicate:
            plan[key] = (assignment.duplicate[key], LogAssignment.DUPLICATE, None)
        else:
            plan[key] = (NO_SCHEMA, LogAssignment.PENDING, assignment.pending.get(key))
    return plan


# The columns of a logs row that hold what was decided of the log (`decided_columns`).
DECIDED_COLUMNS = ("schema_id", "assignment", "why_reason", "why_message")


def decided_columns(fate: tuple[str, LogAssignment, Pending | None]) -> tuple[object, ...]:
    """A log's plan as its logs row keeps it (schema, assignment, why reason, why message)."""
    schema, kind, why = fate
    return (
        None if schema == NO_SCHEMA else schema,
        kind.value,
        None if why is None else str(why.reason),
        None if why is None else why.message,
    )


def changes_a_kept_plan(
    kept: Iterable[tuple[object, ...]], catalog: Catalog, order: BuildOrder
) -> bool:
    """Whether this catalog decides some instance log otherwise than the logs table
    keeps, from the distinct (schema reference, decision) pairs it keeps of them
    (`store.pipeline_state.kept_plans`), not a row per log.

    A log's plan depends on what its reference resolves to, on whether that schema is
    built, and on its author's lower logs resolving to the same schema (`Catalog.assign`).
    So no plan changes unless some resolution or some assigned log's built state does,
    and each such change shows on a pair it holds: a log assigned or waiting is planned
    again as if its author had no other log; a duplicate log must still resolve to the
    schema it duplicates (whether that schema is built does not matter to it)."""
    alone = (b"", 0)
    for ref_id, ref_version, ref_hash, *decided in kept:
        ref = ref_from_columns(
            cast(str | None, ref_id), cast(int | None, ref_version), cast(bytes | None, ref_hash)
        )
        fate = plan_logs({alone: LogSummary(False, ref)}, catalog, order)[alone]
        if decided[1] == LogAssignment.DUPLICATE.value:
            if fate[1] is not LogAssignment.ASSIGNED or fate[0] != decided[0]:
                return True
        elif decided_columns(fate) != tuple(decided):
            return True
    return False


# What `plan_author` reads: a `log` row of the chain step (`row_type` "log": the log's
# summary from its new entries, where it now stands, `held`, `unexplained`, `batch_sums`)
# or a logs row of a log indexed before (`row_type` "stored": `LOG_COLUMNS`).
PLAN_INPUT = arrow_schema(
    [
        ("row_type", pa.string()),
        ("author", pa.binary()),
        ("log_id", pa.decimal128(20, 0)),
        ("is_schema", pa.bool_()),
        ("ref_schema_id", pa.string()),
        ("ref_version", pa.decimal128(20, 0)),
        ("ref_hash", pa.binary()),
        ("schema_id", pa.string()),
        ("assignment", pa.string()),
        ("why_reason", pa.string()),
        ("why_message", pa.string()),
        ("tip_seq", pa.decimal128(20, 0)),
        ("tip_ended", pa.bool_()),
        ("clean", pa.bool_()),
        ("held", pa.int64()),
        ("unexplained", pa.int64()),
        ("batch_sums", pa.string()),
    ]
)
STORED = "stored"
# The columns of PLAN_INPUT the chain step's `log` rows carry.
CHAIN_LOG_INPUT = (
    "row_type",
    "author",
    "log_id",
    "is_schema",
    "ref_schema_id",
    "ref_version",
    "ref_hash",
    "tip_seq",
    "tip_ended",
    "held",
    "unexplained",
    "batch_sums",
)
# The columns of a planned log that `accounts.pending_group` reads.
WAITING_COLUMNS = ("author", "log_id", "waits", "schema_id", "why_reason", "why_message")

# One row per log of the author (`plan_author`): its logs row (`LOG_COLUMNS`); the
# chained partition its messages go to (`schema`, NO_SCHEMA for none) and whether the log
# is that schema's own (`is_schema_log`); how the index accounts for its entries, if it
# does (`waits`); whether the step chained it (`touched`: only those rows are written),
# whether its plan differs from the one the logs table kept (`changed`), whether its tip
# moved (`grew`); and the chain step's counts and sums.
PLANNED_ARROW = arrow_schema(
    [
        *((name, PLAN_INPUT.field(name).type) for name in LOG_COLUMNS),
        ("schema", pa.string()),
        ("is_schema_log", pa.bool_()),
        ("waits", pa.string()),
        ("touched", pa.bool_()),
        ("changed", pa.bool_()),
        ("grew", pa.bool_()),
        ("held", pa.int64()),
        ("unexplained", pa.int64()),
        ("batch_sums", pa.string()),
    ]
)


def plan_author(catalog: Catalog, order: BuildOrder, rows: list[Row]) -> list[Row]:
    """The plans of one author's logs (`PLANNED_ARROW`), from the chain step's rows of the
    logs it chained and the logs rows kept of the author's others (`PLAN_INPUT`). A log
    indexed before keeps the summary it was indexed with: its new entries continue it."""
    chained = {_key(row): row for row in rows if row["row_type"] != STORED}
    stored = {_key(row): row for row in rows if row["row_type"] == STORED}
    summaries = {key: _summary(row) for key, row in chained.items()}
    summaries.update({key: _summary(row) for key, row in stored.items()})
    plan = plan_logs(summaries, catalog, order)
    out: list[Row] = []
    for key, summary in summaries.items():
        new, old = chained.get(key), stored.get(key)
        schema = plan[key][0]
        decided = decided_columns(plan[key])
        where = old if new is None else new
        assert where is not None
        ref_id, ref_version, ref_hash = ref_columns(summary.first_ref)
        tip_seq = cast(int, where["tip_seq"])
        before = 0 if old is None else cast(int | None, old["tip_seq"]) or 0
        out.append(
            {
                "author": key[0],
                "log_id": key[1],
                "is_schema": summary.is_schema,
                "ref_schema_id": ref_id,
                "ref_version": ref_version,
                "ref_hash": ref_hash,
                **dict(zip(DECIDED_COLUMNS, decided, strict=True)),
                "tip_seq": tip_seq,
                "tip_ended": where["tip_ended"],
                "clean": where["clean"] if new is None else new["held"] == 0,
                "schema": schema,
                "is_schema_log": schema_id_of(key) == schema,
                "waits": waits(plan[key]),
                "touched": new is not None,
                "changed": old is not None and decided != _decided(old),
                "grew": new is not None and tip_seq > before,
                "held": 0 if new is None else new["held"],
                "unexplained": 0 if new is None else new["unexplained"],
                "batch_sums": None if new is None else new["batch_sums"],
            }
        )
    return out


def plan_locally(rows: list[Row], catalog: Catalog, order: BuildOrder) -> pa.Table:
    """`plan_author` of every author of `rows` (`PLAN_INPUT` rows), in this process."""
    fn = partial(plan_author, catalog, order)
    return map_groups_locally(rows, ("author",), ("log_id",), fn, PLANNED_ARROW)


def _key(row: Row) -> LogKey:
    return cast(bytes, row["author"]), cast(int, row["log_id"])


def _summary(row: Row) -> LogSummary:
    ref = ref_from_columns(
        cast(str | None, row["ref_schema_id"]),
        cast(int | None, row["ref_version"]),
        cast(bytes | None, row["ref_hash"]),
    )
    return LogSummary(bool(row["is_schema"]), ref)


def _decided(row: Row) -> tuple[object, ...]:
    return tuple(row[name] for name in DECIDED_COLUMNS)


@dataclass(frozen=True, slots=True)
class PlanTotals:
    """What the sequence needs of the planned logs: how many (chained or kept), the
    chain step's counts of entries held and of accepted ones not explained, how many
    chained logs the index accounts for (`waiting`), whether a kept plan changed and
    whether a tip moved, and the sums of the layer the chained logs' messages make
    (`digests.sums_of_layer`)."""

    logs: int = 0
    held: int = 0
    waiting: int = 0
    unexplained: int = 0
    changed: bool = False
    grew: bool = False
    sums: LayerSums = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(astuple(self))

    @classmethod
    def from_json(cls, text: str) -> PlanTotals:
        *counts, sums = json.loads(text)  # JSON keeps the ints and bools as they were
        return replace(cls(*counts), sums=[tuple(row) for row in sums])


# What `plan_totals` reads of the planned logs.
TOTALS_COLUMNS = (
    "schema",
    "assignment",
    "touched",
    "waits",
    "changed",
    "grew",
    "held",
    "unexplained",
    "batch_sums",
)


def plan_totals(batches: Iterable[pa.RecordBatch]) -> PlanTotals:
    """The `PlanTotals` of some planned logs (batches of `TOTALS_COLUMNS` at least)."""
    logs = held = waiting = unexplained = 0
    changed = grew = False
    by_log: list[tuple[str, bool, dict[int, tuple[int, int]]]] = []
    for batch in batches:
        table = pa.Table.from_batches([batch])
        waiting += evaluated(table, PLANNED_WAITING).to_pylist().count(True)
        for row in python_rows(batch):
            logs += 1
            held += cast(int, row["held"])
            unexplained += cast(int, row["unexplained"])
            changed = changed or bool(row["changed"])
            grew = grew or bool(row["grew"])
            if row["batch_sums"] is not None:
                assigned = row["assignment"] == LogAssignment.ASSIGNED.value
                sums = json.loads(cast(str, row["batch_sums"]))
                by_log.append((cast(str, row["schema"]), assigned, {b: (c, s) for b, c, s in sums}))
    return PlanTotals(logs, held, waiting, unexplained, changed, grew, sums_of_layer(by_log))


def added_totals(parts: Iterable[PlanTotals]) -> PlanTotals:
    """The totals of the planned logs of several parts (a Spark task's each)."""
    parts = list(parts)
    return PlanTotals(
        sum(part.logs for part in parts),
        sum(part.held for part in parts),
        sum(part.waiting for part in parts),
        sum(part.unexplained for part in parts),
        any(part.changed for part in parts),
        any(part.grew for part in parts),
        merged_sums(part.sums for part in parts),
    )


def schema_logs_among(
    found: Iterable[tuple[LogKey, bool]], kept: set[LogKey]
) -> dict[LogKey, bool]:
    """Of the chained logs `found` (key, whether a schema log by its new entries), those
    that are schema logs by their new entries or that `kept` names (schema logs by what
    was decided of them): what `IndexSteps.schema_logs` gives."""
    return {key: is_schema for key, is_schema in found if is_schema or key in kept}


def waits(fate: tuple[str, LogAssignment, Pending | None]) -> str | None:
    """How the index accounts for the entries of a log with this plan, if it does
    (`accounts.pending_group`): a duplicate log's, and those of a log that waits. None:
    a schema build reduces them."""
    _, kind, why = fate
    if kind is LogAssignment.DUPLICATE:
        return LogAssignment.DUPLICATE.value
    return None if why is None else LogAssignment.PENDING.value
