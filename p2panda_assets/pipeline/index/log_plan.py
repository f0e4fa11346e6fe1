"""Each log's plan, as the index step decides it and the logs table keeps it: the
schema its messages go with, its assignment, and why its entries wait, if they do
(`plan_logs`)."""

from __future__ import annotations

from decimal import Decimal

from pyspark.sql import DataFrame, SparkSession

from p2panda_assets.engine.corpus import Catalog, LogKey, LogSummary, schema_id_of
from p2panda_assets.engine.relations import BuildOrder
from p2panda_assets.errors import Pending
from p2panda_assets.pipeline.columnar.warehouse import NO_SCHEMA
from p2panda_assets.pipeline.kernels.chain import ref_columns
from p2panda_assets.pipeline.spark.frames import local_frame
from p2panda_assets.statuses import Assignment as LogAssignment

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


def decided_columns(fate: tuple[str, LogAssignment, Pending | None]) -> tuple[object, ...]:
    """A log's plan as its logs row keeps it (schema, assignment, why reason, why message)."""
    schema, kind, why = fate
    return (
        None if schema == NO_SCHEMA else schema,
        kind.value,
        None if why is None else str(why.reason),
        None if why is None else why.message,
    )


def plan_rows(plan: LogPlan) -> list[tuple[bytes, int, str, str, bool]]:
    """Each log's plan as its messages' columns in a chained layer take it: (author, log
    id, `schema`, `assignment`, `is_schema_log`: whether the log is its schema's own)."""
    return [
        (author, log_id, schema, assignment.value, schema_id_of((author, log_id)) == schema)
        for (author, log_id), (schema, assignment, _) in plan.items()
    ]


def plan_frame(spark: SparkSession, plan: LogPlan) -> DataFrame:
    """`plan_rows` as a Spark frame, to join the accepted entries with."""
    rows = [(author, Decimal(log_id), *rest) for author, log_id, *rest in plan_rows(plan)]
    return local_frame(
        spark,
        rows,
        "author binary, log_id decimal(20,0), schema string, assignment string, "
        "is_schema_log boolean",
    )


def log_rows(summaries: dict[LogKey, LogSummary], catalog: Catalog) -> list[tuple[object, ...]]:
    """The rows of the logs table for these summaries (where the logs stand not known:
    the next index step chains them all)."""
    unknown: tuple[object, ...] = (None, None, None)
    logs = {key: (summary, unknown) for key, summary in summaries.items()}
    return log_rows_with_tips(logs, plan_logs(summaries, catalog, catalog.order()))


def log_rows_with_tips(
    logs: dict[LogKey, tuple[LogSummary, tuple[object, ...]]], plan: LogPlan
) -> list[tuple[object, ...]]:
    """Logs rows (`store.logs.LOG_COLUMNS`) for these logs: (summary, (tip seq, ended,
    all accepted))."""
    rows: list[tuple[object, ...]] = []
    for key, (summary, tip) in logs.items():
        rows.append(
            (
                key[0],
                key[1],
                summary.is_schema,
                *ref_columns(summary.first_ref),
                *decided_columns(plan[key]),
                *tip,
            )
        )
    return rows
