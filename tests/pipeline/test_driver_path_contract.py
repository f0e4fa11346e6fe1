"""The index step's driver path held to the shared rules, fast (issue 55): every method of
`DriverIndexSteps` runs over a small warehouse written with pyarrow (no Spark, no
PostgreSQL), and what it gives is compared with the rule stated plainly over the same
rows: the chain rules' kernel (`chain_group`), the accounts' kernel (`pending_group`),
the message index (`indexed_message`). A rule changed in the driver path alone fails
here; `tests/pipeline/test_index_step_contract.py` (marked spark) then compares the two
paths with each other."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pyarrow as pa
import pytest

from p2panda_assets.engine.corpus import Catalog, LogKey, LogSummary, schema_id_of
from p2panda_assets.pipeline.columnar.layers import DECODED_COLUMNS
from p2panda_assets.pipeline.columnar.warehouse import Warehouse
from p2panda_assets.pipeline.index.accounts import pending_group, schema_account_rows
from p2panda_assets.pipeline.index.driver_path import read_layers_locally
from p2panda_assets.pipeline.index.log_plan import (
    LogPlan,
    PlanTotals,
    decided_columns,
    plan_logs,
    waits,
)
from p2panda_assets.pipeline.index.paths import ACCOUNT_ORIGIN_ARROW, DriverIndexSteps
from p2panda_assets.pipeline.kernels.batches import Row, python_rows
from p2panda_assets.pipeline.kernels.chain import CHAIN_INPUT, chain_locally, ref_from_columns
from p2panda_assets.pipeline.kernels.digests import sums_of_layer
from p2panda_assets.protocol.message_index import indexed_message
from p2panda_assets.statuses import Assignment
from tests.pipeline.arrow_store import catalog_of, rows_in_order, write_batches
from tests.pipeline.test_index_step_contract import a_corpus_with_every_kind_of_log


def rows_of(table: pa.Table) -> list[Row]:
    """A table's rows as the kernels take them, in one order."""
    return rows_in_order([row for batch in table.to_batches() for row in python_rows(batch)])


def by_hash(rows: list[Row]) -> dict[bytes, Row]:
    return {cast(bytes, row["hash"]): row for row in rows}


@dataclass
class Walk:
    """The verified entries as verification made them, and every handle the driver path
    gave back, as `pipeline.index.sequence.IndexSteps.index` asks for them."""

    steps: DriverIndexSteps
    warehouse: Warehouse
    good: list[Row]
    verified: pa.Table
    rows: list[Row]
    chained: pa.Table
    found: dict[LogKey, bool]
    plan: LogPlan  # the rule, stated plainly over the chain kernel's summaries
    planned: pa.Table
    totals: PlanTotals
    catalog: Catalog
    accepted: pa.Table
    pending: pa.Table | None
    accounts: pa.Table
    run: str


@pytest.fixture(scope="module")
def walk(tmp_path_factory: pytest.TempPathFactory) -> Walk:
    corpus, registered = a_corpus_with_every_kind_of_log()
    warehouse = Warehouse(str(tmp_path_factory.mktemp("warehouse")), "contract")
    state, good = write_batches(warehouse, [corpus.pairs])
    steps = DriverIndexSteps(warehouse)
    verified = steps.verified(state)
    rows = steps.rows(verified, len(good))
    assert rows is not None
    chained = steps.chain(verified, rows, {})
    found = steps.schema_logs(chained, set())
    summaries = {key: summary for key, summary, _ in chain_logs(rows)}
    catalog = catalog_of(corpus.pairs, summaries, registered)
    plan = plan_logs(summaries, catalog, catalog.order())
    planned = steps.plan(chained, [], catalog, catalog.order())
    totals = steps.totals(planned)
    accepted = steps.accepted(verified, chained, totals.held)
    pending = steps.pending(accepted, planned, totals.waiting)
    accounts = steps.accounts(chained, pending, schema_account_rows(catalog))
    run = steps.write(accepted, planned, totals, True)
    handles = (verified, rows, chained, found, plan, planned, totals, catalog, accepted)
    return Walk(steps, warehouse, good, *handles, pending, accounts, run)


def chain_logs(rows: list[Row]) -> list[tuple[LogKey, LogSummary, Row]]:
    """Each log the chain kernel finds in `rows`: its key, its summary, its `log` row."""
    chained = rows_of(chain_locally([dict(row) for row in rows], {}))
    return [
        (
            (cast(bytes, r["author"]), cast(int, r["log_id"])),
            LogSummary(
                bool(r["is_schema"]),
                ref_from_columns(
                    cast(str | None, r["ref_schema_id"]),
                    cast(int | None, r["ref_version"]),
                    cast(bytes | None, r["ref_hash"]),
                ),
            ),
            r,
        )
        for r in chained
        if r["row_type"] == "log"
    ]


def refused(walk: Walk) -> set[bytes]:
    """The entries the chain rules reject or hold: an account row each (`chain_group`)."""
    chained = chain_locally([dict(row) for row in walk.rows], {})
    return {cast(bytes, r["hash"]) for r in rows_of(chained) if r["row_type"] == "account"}


def test_the_fixture_has_what_the_rules_need(walk: Walk) -> None:
    """Held entries, a waiting log, a schema account, a delete: no rule checked on
    nothing."""
    assert len(refused(walk)) == 2
    assert walk.totals.waiting and walk.pending is not None and walk.pending.num_rows
    assert walk.found  # the schema logs
    assert schema_account_rows(walk.catalog)
    assert any(row["kind"] == "delete" for row in rows_of(walk.accepted))


def test_verified_are_the_good_entries_verification_wrote(walk: Walk) -> None:
    assert rows_of(walk.verified) == rows_in_order(walk.good)


def test_the_rows_to_chain_are_the_chain_input(walk: Walk) -> None:
    expected = [{c: row[c] for c in CHAIN_INPUT} for row in walk.good]
    assert sorted(walk.rows, key=repr) == sorted(expected, key=repr)


def test_chaining_is_the_chain_kernel(walk: Walk) -> None:
    kernel = chain_locally([dict(row) for row in walk.rows], {})
    assert rows_of(walk.chained) == rows_of(kernel)


def test_the_schema_logs_found_are_the_kernels(walk: Walk) -> None:
    expected = {key: True for key, summary, _ in chain_logs(walk.rows) if summary.is_schema}
    assert walk.found == expected


def test_each_log_is_planned_by_the_plan_rule(walk: Walk) -> None:
    """A row per chained log: its summary and tip as the chain kernel found them, what
    `plan_logs` decides of it, and whether the index accounts for its entries."""
    planned = {(r["author"], r["log_id"]): r for r in rows_of(walk.planned)}
    logs = chain_logs(walk.rows)
    assert set(planned) == {key for key, _, _ in logs}
    for key, summary, log in logs:
        row = planned[key]
        decided = decided_columns(walk.plan[key])
        assert (row["schema_id"], row["assignment"], row["why_reason"], row["why_message"]) == (
            decided
        )
        assert row["schema"] == walk.plan[key][0]
        assert row["is_schema_log"] == (schema_id_of(key) == walk.plan[key][0])
        assert row["waits"] == waits(walk.plan[key])
        assert row["is_schema"] == summary.is_schema
        assert (row["tip_seq"], row["tip_ended"]) == (log["tip_seq"], log["tip_ended"])
        assert row["clean"] == (log["held"] == 0)
        assert row["touched"] and row["grew"] and not row["changed"]


def test_the_totals_are_the_chained_logs_sums(walk: Walk) -> None:
    logs = chain_logs(walk.rows)
    assert walk.totals.logs == len(logs)
    assert walk.totals.held == len(refused(walk)) == sum(cast(int, r["held"]) for *_, r in logs)
    assert walk.totals.waiting == sum(waits(fate) is not None for fate in walk.plan.values())
    sums = [
        (
            walk.plan[key][0],
            walk.plan[key][1] is Assignment.ASSIGNED,
            {b: (c, bits) for b, c, bits in json.loads(cast(str, r["batch_sums"]))},
        )
        for key, _, r in logs
    ]
    assert walk.totals.sums == sums_of_layer(sums)
    assert walk.totals.sums and not walk.totals.changed and walk.totals.grew


def test_the_accepted_entries_are_those_the_rules_do_not_refuse(walk: Walk) -> None:
    out = refused(walk)
    expected = [row for row in walk.good if row["hash"] not in out]
    assert rows_of(walk.accepted) == rows_in_order(expected)


def test_the_pending_accounts_are_the_kernels(walk: Walk) -> None:
    """Each waiting log's accepted entries through `pending_group`, in seq order."""
    expected: list[tuple[Any, ...]] = []
    accepted = rows_of(walk.accepted)
    for (author, log_id), fate in walk.plan.items():
        if waits(fate) is None:
            continue
        schema_id, _, why_reason, why_message = decided_columns(fate)
        columns = {
            "waits": waits(fate),
            "schema_id": schema_id,
            "why_reason": why_reason,
            "why_message": why_message,
        }
        log = [
            {**row, **columns}
            for row in sorted(accepted, key=lambda r: cast(int, r["seq"]))
            if (row["author"], row["log_id"]) == (author, log_id)
        ]
        expected += [(*a.values(), "pending") for a in pending_group(log)] if log else []
    assert walk.pending is not None
    assert walk.pending.schema == ACCOUNT_ORIGIN_ARROW
    got = [tuple(row.values()) for row in walk.pending.to_pylist()]
    assert sorted(got, key=repr) == sorted(expected, key=repr)


def test_the_index_accounts_are_the_chain_rules_the_schemas_and_the_pending(walk: Walk) -> None:
    chained = rows_of(chain_locally([dict(row) for row in walk.rows], {}))
    expected = [
        (r["hash"], None, r["state"], r["reason"], r["message"], "chain")
        for r in chained
        if r["row_type"] == "account"
    ]
    expected += schema_account_rows(walk.catalog)
    assert walk.pending is not None
    expected += [tuple(row.values()) for row in walk.pending.to_pylist()]
    assert walk.accounts.schema == ACCOUNT_ORIGIN_ARROW
    got = [tuple(row.values()) for row in walk.accounts.to_pylist()]
    assert sorted(got, key=repr) == sorted(expected, key=repr)


def test_the_written_layer_holds_each_accepted_entry_decoded(walk: Walk) -> None:
    """Each accepted entry of a planned log, by its plan's schema partition, with its
    assignment, whether its log is a schema's, its batch, and the reason its payload
    does not decode (as verification kept it, else as the message index gives it)."""
    layer = by_hash(rows_of(read_layers_locally([walk.warehouse.chained(walk.run)])))
    accepted = by_hash(rows_of(walk.accepted))
    planned = {h: row for h, row in accepted.items() if (row["author"], row["log_id"]) in walk.plan}
    assert set(layer) == set(planned)
    for entry_hash, row in planned.items():
        key = (cast(bytes, row["author"]), cast(int, row["log_id"]))
        schema, assignment, _ = walk.plan[key]
        error = row["message_error"]
        if row["kind"] is None and error is None:
            error = indexed_message(cast(bytes, row["payload"]))[1]
        expected = {
            **{c: row[c] for c in DECODED_COLUMNS if c in row},
            "batch": row["batch"],
            "is_schema_log": schema_id_of(key) == schema,
            "error": error,
            "assignment": cast(Assignment, assignment).value,
            "schema": schema,
        }
        assert layer[entry_hash] == expected, entry_hash.hex()


def test_the_accepted_entry_at_a_position_is_the_layers(walk: Walk) -> None:
    accepted = rows_of(walk.accepted)
    positions = [
        (cast(bytes, r["author"]), cast(int, r["log_id"]), cast(int, r["seq"])) for r in accepted
    ]
    layers = [walk.warehouse.chained(walk.run)]
    found = walk.steps.accepted_at(layers, [*positions, (b"\x00" * 32, 1, 1)])
    expected = [(p, cast(bytes, r["hash"])) for p, r in zip(positions, accepted, strict=True)]
    assert sorted(found) == sorted(expected)


def test_a_merged_layer_holds_the_layers_messages(walk: Walk) -> None:
    layers = [walk.warehouse.chained(walk.run)] * 2
    merged = walk.steps.merge(layers)
    assert rows_of(read_layers_locally([walk.warehouse.chained(merged)])) == rows_of(
        read_layers_locally(layers)
    )
    walk.steps.remove_run(merged)
    assert not Path(walk.warehouse.chained(merged)).exists()
