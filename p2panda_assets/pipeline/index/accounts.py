"""The accounts the index step decides beyond the chain rules' own: each schema log
entry's (the catalog's), and those of the logs no schema build will reduce (pending, or
an author's duplicate log for a schema). Both paths of the index step
(`pipeline.index.paths`) make them from these."""

from __future__ import annotations

from decimal import Decimal
from typing import cast

import pyarrow as pa

from p2panda_assets.engine.corpus import (
    Accounts,
    Catalog,
    duplicate_log_accounts,
    pending_accounts,
)
from p2panda_assets.errors import Pending, Reason
from p2panda_assets.pipeline.columnar.warehouse import NO_SCHEMA
from p2panda_assets.pipeline.index.log_plan import LogPlan
from p2panda_assets.pipeline.kernels.batches import Row, arrow_schema
from p2panda_assets.pipeline.kernels.chain import account_rows, items_log
from p2panda_assets.statuses import Assignment as LogAssignment

ACCOUNT_ARROW = arrow_schema(
    [
        ("hash", pa.binary()),
        ("schema_id", pa.string()),
        ("state", pa.string()),
        ("reason", pa.string()),
        ("message", pa.string()),
    ]
)


def schema_account_rows(catalog: Catalog) -> list[tuple[object, ...]]:
    """Every schema log entry's account, as (hash, schema id, state, reason, message,
    origin) rows."""
    accounts: Accounts = {}
    for schema_id in catalog.histories:
        accounts.update(catalog.schema_accounts(schema_id))
    return [(*row.values(), "schema") for row in account_rows(accounts)]


def waiting_logs(plan: LogPlan) -> list[tuple[object, ...]]:
    """The logs whose entries the index accounts for, as (author, log id, plan, plan
    schema, why reason, why message): duplicate logs, and logs that wait."""
    waiting: list[tuple[object, ...]] = []
    for (author, log_id), (schema, kind, why) in plan.items():
        if kind is LogAssignment.DUPLICATE:
            waiting.append((author, log_id, LogAssignment.DUPLICATE.value, schema, "", ""))
        elif why is not None:
            named = None if schema == NO_SCHEMA else schema
            waiting.append(
                (author, log_id, LogAssignment.PENDING.value, named, str(why.reason), why.message)
            )
    return waiting


def decimal_log_ids(rows: list[tuple[object, ...]]) -> list[tuple[object, ...]]:
    """`waiting_logs` rows with their log id as Spark's decimal(20,0) takes it."""
    return [(author, Decimal(cast(int, log_id)), *rest) for author, log_id, *rest in rows]


def pending_group(rows: list[Row]) -> list[Row]:
    """The accounts of one waiting log's accepted entries (with its `waiting_logs` plan)."""
    log = items_log(rows)
    first = rows[0]
    schema_id = cast(str | None, first["plan_schema"])
    if first["plan"] == LogAssignment.DUPLICATE:
        assert schema_id is not None
        accounts = duplicate_log_accounts(log, schema_id)
    else:
        why = Pending(Reason(str(first["why_reason"])), str(first["why_message"]))
        accounts = pending_accounts(log, why, schema_id)
    return account_rows(accounts)
