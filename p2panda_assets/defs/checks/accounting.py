"""`entries_are_accounted`: applied + superseded + pending + rejected = the stored entries
of the schema's logs, each accounted exactly once (rule A-ONCE, docs/semantics.md). Its
metadata names the partition's rejected entries (`rejected_entries`), the first
`REJECTED_SHOWN`, so that a count in the UI leads to the entries behind it."""

from typing import Any

import dagster as dg
import psycopg

from p2panda_assets.defs.assets import materialized_table, registered_partition
from p2panda_assets.defs.partitions import schemas
from p2panda_assets.defs.resources import PostgresResource
from p2panda_assets.engine.corpus import State
from p2panda_assets.store.accounting import account_totals, accounts_by_state
from p2panda_assets.store.registry import shown_name_of
from p2panda_assets.store.rejections import Rejection, rejected_count, rejections

REJECTED_SHOWN = 100  # rows of the table in the check's metadata: the UI shows them all
REJECTED_COLUMNS = (
    dg.TableColumn("hash", "string", description="the entry hash, hex"),
    dg.TableColumn("author", "string", description="hex"),
    dg.TableColumn("log", "int"),
    dg.TableColumn("seq", "int"),
    dg.TableColumn("reason", "string", description="reason code"),
    dg.TableColumn("from", "string", description="file:line it was ingested from"),
    dg.TableColumn("message", "string"),
)


def accounting(conn: psycopg.Connection, schema_id: str) -> tuple[list[str], dict[str, Any]]:
    """Problems with the schema's accounts, and the counts behind them.

    Stored entries of the schema are those of its logs (its own, and the instance logs the
    index assigned to it). Entries not verified yet (no verdict: ingested after the last
    index step) are not expected to be accounted and are only counted.
    """
    totals = account_totals(conn, schema_id)
    by_state = {str(state): 0 for state in State}
    by_reason: dict[str, int] = {}
    for state, reason, count in accounts_by_state(conn, schema_id):
        by_state[state] += count
        if state == State.REJECTED:
            by_reason[reason or "unknown"] = by_reason.get(reason or "unknown", 0) + count
    lines = []
    if sum(by_state.values()) != totals.stored:
        lines.append(
            f"{' + '.join(by_state)} = {sum(by_state.values())}, "
            f"but {totals.stored} verified entries are stored for the schema"
        )
    if totals.missing:
        lines.append(f"{totals.missing} stored entries of the schema's logs have no account")
    if totals.elsewhere:
        lines.append(
            f"{totals.elsewhere} entries of the schema's logs are accounted to another schema"
        )
    if totals.foreign:
        lines.append(f"{totals.foreign} accounts of the schema are for entries not on its logs")
    counts = {
        "stored": totals.stored,
        "unverified": totals.unverified,
        **by_state,
        "rejected_by_reason": dg.MetadataValue.json(dict(sorted(by_reason.items()))),
    }
    return lines, counts


def rejected_entries(conn: psycopg.Connection, schema_id: str) -> dict[str, Any]:
    """The schema's rejected entries as a metadata table, bounded (`REJECTED_SHOWN`),
    with how many there are in all."""
    found = rejections(conn, schema_id, limit=REJECTED_SHOWN)
    return {
        "rejected_entries": dg.MetadataValue.table(
            records=[rejected_record(rejection) for rejection in found],
            schema=dg.TableSchema(columns=list(REJECTED_COLUMNS)),
        ),
        "rejected_entries_shown": f"{len(found)} of {rejected_count(conn, schema_id)}",
    }


def rejected_record(rejection: Rejection) -> dg.TableRecord:
    """One rejected entry, the columns `panda status --rejected` shows."""
    return dg.TableRecord(
        {
            "hash": rejection.hash.hex(),
            "author": None if rejection.author is None else rejection.author.hex(),
            "log": rejection.log_id,
            "seq": rejection.seq_num,
            "reason": rejection.reason,
            "from": rejection.place,
            "message": rejection.message,
        }
    )


@dg.asset_check(
    asset=materialized_table,
    partitions_def=schemas,
    description="Every stored entry of the schema's logs is accounted exactly once: applied "
    "+ superseded + pending + rejected = stored entries (rule A-ONCE, docs/semantics.md).",
)
def entries_are_accounted(
    context: dg.AssetCheckExecutionContext, postgres: PostgresResource
) -> dg.AssetCheckResult:
    with postgres.connect() as conn:
        schema_id = registered_partition(conn, context.partition_key)
        lines, counts = accounting(conn, schema_id)
        rejected = rejected_entries(conn, schema_id)
        name = shown_name_of(conn, schema_id) or schema_id
    return dg.AssetCheckResult(
        passed=not lines,
        description="ok" if not lines else "; ".join(lines),
        metadata={"schema_name": name, **counts, **rejected},
    )
