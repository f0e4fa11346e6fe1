"""What a materialization writes to PostgreSQL, and how a schema whose write fails fails
alone. A build's staging tables (`stage_tables`: one for each schema's rows, shared
ones for the accounts and the deleted sets) are made first and dropped at the end
whatever happens; the reduced rows are copied into them (`write_reduced`, by
`staging.stage_reduced`); then the tables are swapped in (`swap_in`) or an increment is
applied to each (`apply_increment`). A schema whose stage, rows or swap PostgreSQL
refuses is recorded `failed` with the message (`fail`) and keeps its old table; the
others are built."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import psycopg
from pyspark.sql import DataFrame, Row

from p2panda_assets.engine.corpus import Catalog
from p2panda_assets.errors import Reason
from p2panda_assets.pipeline.build.columns import pg_type
from p2panda_assets.pipeline.build.staging import row_target, stage_reduced
from p2panda_assets.pipeline.context import BuildContext
from p2panda_assets.pipeline.postgres.copy import CopyResult
from p2panda_assets.statuses import BuildStatus
from p2panda_assets.store import tables
from p2panda_assets.store.copying import Target
from p2panda_assets.store.staging import Stage, drop_tables
from p2panda_assets.store.tables import BuildState, Outcome


@dataclass
class Stages:
    """A build's staging tables: one for the rows of each schema whose lens has a field,
    one for every schema's accounts, and, for a whole build, one for their deleted
    sets. A row stage swapped in leaves `rows`: it is its schema's table now."""

    rows: dict[str, Stage]
    accounts: Stage
    deleted: Stage | None


@contextmanager
def stage_tables(
    ctx: BuildContext, outcomes: list[Outcome], *, deleted_sets: bool
) -> Iterator[Stages]:
    """The staging tables of a build of `outcomes` (with one for the deleted sets if
    `deleted_sets`), dropped at the end, whatever fails, but those swapped in."""
    token = secrets.token_hex(6)
    rows: dict[str, Stage] = {}
    accounts = deleted = None
    try:
        _stage_rows(ctx, outcomes, token, rows)
        accounts = tables.create_shared_stage(ctx.conn, f"stage_{token}_accounts", "accounts")
        if deleted_sets:
            deleted = tables.create_shared_stage(
                ctx.conn, f"stage_{token}_deleted", "deleted_instances"
            )
        yield Stages(rows, accounts, deleted)
    finally:
        drop_tables(ctx.conn, [*rows.values(), accounts, deleted])


def _stage_rows(
    ctx: BuildContext, outcomes: list[Outcome], token: str, stages: dict[str, Stage]
) -> None:
    """A staging table for the rows of each schema whose lens has a field, added to
    `stages` as it is made (`stage_tables` drops what is there, whatever fails later). A
    schema whose table PostgreSQL refuses (a lens of more fields than a table may have
    columns) fails alone: it stopped the build of every schema before."""
    for i, outcome in enumerate(outcomes):
        lens = ctx.catalog.histories[outcome.schema_id].lens
        if lens:
            schema, _ = tables.split_table_name(outcome.table_name)
            columns = [(name, pg_type(spec.type)) for name, spec in lens.items()]
            try:
                stages[outcome.schema_id] = tables.create_stage(
                    ctx.conn, schema, f"stage_{token}_{i}", columns
                )
            except psycopg.Error as error:
                fail(ctx, outcome, f"staging its table failed: {database_error(error)}")


def row_targets(ctx: BuildContext, staged: Stages, schema_ids: Sequence[str]) -> dict[str, Target]:
    """Where the copy writes the rows of each of `schema_ids` that has a row stage."""
    lenses = ctx.catalog.histories
    return {s: row_target(staged.rows[s], lenses[s].lens) for s in schema_ids if s in staged.rows}


def write_reduced(
    ctx: BuildContext,
    reduced: DataFrame,
    ok: list[Outcome],
    deleted: tuple[DataFrame, int],
    staged: Stages,
) -> None:
    """The live rows, the accounts and the deleted sets of a whole build's schemas `ok`
    (whose logs all reduced) into staging, from the reduction (`reduced`) and what its
    cascades left deleted (`deleted`, and how many rows). A version's build keeps no
    accounts and no deleted set."""
    schema_ids = [o.schema_id for o in ok]
    kept = ctx.as_of is None
    result = stage_reduced(
        ctx.url,
        reduced,
        schema_ids,
        deleted,
        row_targets(ctx, staged, schema_ids),
        staged.accounts if kept else None,
        staged.deleted if kept else None,
    )
    fail_unwritten(ctx, result, {o.schema_id: o for o in ok})
    for outcome in ok:
        outcome.rows = result.rows.get(outcome.schema_id, 0)
        outcome.fallbacks = _fallbacks(ctx.catalog, outcome.schema_id, result.tallies)


def _fallbacks(
    catalog: Catalog, schema_id: str, tallies: dict[str, dict[str, int]]
) -> dict[str, int]:
    """Rows per field whose value fell back to the field's default, as the copy of the
    rows tallied them (`copy_partitions`): counted in the scan that copies the rows, not
    by a Spark job of its own (1.5-1.8 s at 1M entries)."""
    tally = tallies.get(schema_id, {})
    return {name: tally.get(name, 0) for name in catalog.histories[schema_id].lens}


def index_shared(ctx: BuildContext, staged: Stages) -> None:
    """Index the shared stages by schema, for the swaps that read them a schema at a time."""
    tables.index_shared_stage(ctx.conn, staged.accounts)
    if staged.deleted is not None:
        tables.index_shared_stage(ctx.conn, staged.deleted)


def swap_in(
    ctx: BuildContext,
    outcomes: list[Outcome],
    staged: Stages,
    states: Mapping[str, BuildState],
) -> None:
    """Swap in the staged tables of those of `outcomes` whose build has not failed. Each
    staged table's key is built first, before the swap's transaction (which then holds
    its locks the shorter). The current tables are swapped in one transaction, each in
    a savepoint of its own (`tables.swap_schemas`), with their build states `states`;
    a version table in a transaction each. A schema whose key or swap fails fails alone."""
    conn = ctx.conn
    built = [o for o in outcomes if o.status is not BuildStatus.FAILED]
    failed = _failures(
        [o for o in built if o.schema_id in staged.rows],
        lambda o: tables.index_stage(conn, staged.rows[o.schema_id]),
    )
    built = [o for o in built if o.schema_id not in failed]
    if ctx.as_of is None:
        assert staged.deleted is not None  # a whole build stages the deleted sets
        swaps = [
            tables.Swap(o, staged.rows.get(o.schema_id), states.get(o.schema_id)) for o in built
        ]
        failed |= tables.swap_schemas(
            conn, swaps, staged.accounts, staged.deleted, ctx.index.fingerprint
        )
    else:
        failed |= _failures(
            built, lambda o: tables.swap_version(conn, o, staged.rows.get(o.schema_id))
        )
    by_id = {o.schema_id: o for o in outcomes}
    for schema_id, error in failed.items():
        fail(ctx, by_id[schema_id], f"swap failed: {database_error(error)}")
    for outcome in built:
        if outcome.schema_id not in failed:  # its stage is its table now
            staged.rows.pop(outcome.schema_id, None)


def apply_increment(
    ctx: BuildContext,
    outcome: Outcome,
    staged: Stages,
    replaced: Sequence[bytes],
    deleted: Sequence[bytes],
    state: BuildState,
) -> None:
    """Replace the rows of the `replaced` instances in `outcome`'s table by those
    staged, with their accounts, and add `deleted` to its deleted set, in one
    transaction (`tables.apply_increment`). If that fails, the schema fails alone and
    keeps its table."""
    try:
        tables.apply_increment(
            ctx.conn,
            outcome,
            staged.rows[outcome.schema_id],
            replaced,
            deleted,
            staged.accounts,
            ctx.index.fingerprint,
            state,
        )
    except psycopg.Error as error:
        fail(ctx, outcome, f"adding to the table failed: {database_error(error)}")


def _failures(
    outcomes: list[Outcome], action: Callable[[Outcome], None]
) -> dict[str, psycopg.Error]:
    """`action` for each of `outcomes`, one failing not stopping the others; the
    database errors of those it failed for, by schema."""
    failed: dict[str, psycopg.Error] = {}
    for outcome in outcomes:
        try:
            action(outcome)
        except psycopg.Error as error:
            failed[outcome.schema_id] = error
    return failed


def fail_errors(ctx: BuildContext, errors: list[Row], by_id: dict[str, Outcome]) -> list[str]:
    """Fail the schemas of these collected `error` rows of a reduction; the others, still
    to build."""
    for row in errors:
        fail(ctx, by_id[row["schema"]], f"reduction failed: {row['message']}")
    return [s for s, o in by_id.items() if o.status is not BuildStatus.FAILED]


def fail_unwritten(ctx: BuildContext, result: CopyResult, by_id: Mapping[str, Outcome]) -> None:
    """Fail the schemas whose rows the copy could not write (`result.errors`)."""
    for schema_id, error in result.errors.items():
        fail(ctx, by_id[schema_id], f"writing rows failed: {error}")


def database_error(error: psycopg.Error) -> str:
    """PostgreSQL's message and its detail (which names the objects involved) on one line."""
    primary = error.diag.message_primary or str(error).strip()
    detail = error.diag.message_detail
    return f"{primary} ({'; '.join(detail.splitlines())})" if detail else primary


def fail(ctx: BuildContext, outcome: Outcome, message: str) -> None:
    """A schema whose build failed keeps its old table; its registry row says why."""
    outcome.status, outcome.reason = BuildStatus.FAILED, str(Reason.INTERNAL)
    outcome.message = message
    record_status(ctx, outcome)


def record_status(ctx: BuildContext, outcome: Outcome) -> None:
    """The outcome's status into its registry row (`tables.record_status`), unless the
    build is of a version: a version table has no registry row of its own."""
    if ctx.as_of is None:
        tables.record_status(ctx.conn, outcome)
