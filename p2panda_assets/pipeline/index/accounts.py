"""The accounts the index step decides beyond the chain rules' own: each schema log
entry's (the catalog's), and those of the logs no schema build will reduce (pending, or
an author's duplicate log for a schema). Both paths of the index step
(`pipeline.index.paths`) make them from these."""

from __future__ import annotations

from typing import cast

import pyarrow as pa

from p2panda_assets.engine.corpus import (
    Accounts,
    Catalog,
    duplicate_log_accounts,
    pending_accounts,
)
from p2panda_assets.errors import Pending, Reason
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


def pending_group(rows: list[Row]) -> list[Row]:
    """The accounts of one waiting log's accepted entries, with its plan's
    `log_plan.WAITING_COLUMNS` (`waits`: how the index accounts for them)."""
    log = items_log(rows)
    first = rows[0]
    schema_id = cast(str | None, first["schema_id"])
    if first["waits"] == LogAssignment.DUPLICATE:
        assert schema_id is not None
        accounts = duplicate_log_accounts(log, schema_id)
    else:
        why = Pending(Reason(str(first["why_reason"])), str(first["why_message"]))
        accounts = pending_accounts(log, why, schema_id)
    return account_rows(accounts)
