"""Materialized tables: staging them, and swapping the tables, accounts, deleted sets,
registry rows and views of a build in one transaction (readers see the old tables or
the new ones, never half of one). Every identifier goes through `sql.Identifier`. The
swaps are compositions: each `p2panda.*` table they change is written by its own module
(`accounts.py`, `deleted_instances.py`, `schemas.py`, `schema_versions.py`), called in
order on the swap's connection.

Staging objects are named `stage_<token>_<n>` (tables) and `stage_<token>_<n>_pkey`
(their primary key), in the schema of their target; at the swap both take the target's
names (`<table>`, `<table>_pkey`), so a sweep of `stage_*` finds only staging objects.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace
from typing import cast

import psycopg
from psycopg import sql

from p2panda_assets.failpoints import Failpoint, failpoint
from p2panda_assets.statuses import BUILT, BuildPath, BuildStatus, SchemaStatus
from p2panda_assets.store import accounts as accounts_sql
from p2panda_assets.store import deleted_instances as deleted_sql
from p2panda_assets.store import schema_versions, schemas
from p2panda_assets.store.staging import Stage
from p2panda_assets.store.views import create_views, drop_views

# The registry statuses of a schema whose table step ran (it has its table, or none is due).

SYSTEM_COLUMNS = (  # (name, type); all NOT NULL, `_instance_id` the primary key
    ("_instance_id", "text"),
    ("_author", "text"),
    ("_version", "bigint"),
    ("_seq", "numeric(20, 0)"),
    ("_entry", "text"),  # hash (hex) of the entry that last wrote the row
)


@dataclass(slots=True)
class Outcome:
    """What one materialization did, for the registry, the CLI and Dagster metadata.
    `status`: materialized | dropped (the lens has no field) | pending | failed |
    unchanged (nothing new since the table was built)."""

    schema_id: str
    status: BuildStatus
    message: str = ""
    reason: str | None = None  # a reason code, for pending and failed
    rows: int = 0
    version: int | None = None
    version_hash: str | None = None
    table_name: str = ""
    upstream: tuple[str, ...] = ()
    fallbacks: dict[str, int] = field(default_factory=dict)
    name: str | None = None  # the schema's own name, from its meta message
    description: str | None = None
    migrations: dict[str, str] = field(default_factory=dict)  # version -> safe | lossy
    incremental: bool = False  # built by adding what is new (`pipeline.build.increments`)
    path: BuildPath | None = None  # where its build ran; None: nothing built


@dataclass(frozen=True, slots=True)
class BuildState:
    """What a schema's table was built from: every message of its instance logs from
    verified batches up to `batch` (their `digest`), under the lens whose key is `lens`,
    and the deleted sets of the other schemas its cascades read (`cascades_from`) as
    they were when the table was written (`deleted`, `deleted_key`; None before). A
    later build that finds the same digest for those batches, the same lens key and the
    same deleted sets adds only the instances that messages of later batches name
    (`pipeline.build.increments`)."""

    batch: int
    digest: str
    lens: str
    cascades_from: tuple[str, ...] = ()
    deleted: str | None = None

    def as_json(self) -> dict[str, object]:
        return {
            "batch": self.batch,
            "digest": self.digest,
            "lens": self.lens,
            "cascades_from": list(self.cascades_from),
            "deleted": self.deleted,
        }

    @classmethod
    def from_json(cls, value: dict[str, object]) -> BuildState:
        deleted = value.get("deleted")
        return cls(
            int(cast(int, value["batch"])),
            str(value["digest"]),
            str(value["lens"]),
            tuple(str(s) for s in cast(list[object], value.get("cascades_from") or [])),
            None if deleted is None else str(deleted),
        )


def split_table_name(table_name: str) -> tuple[str, str]:
    schema, name = table_name.split(".")
    return schema, name


def create_stage(
    conn: psycopg.Connection, schema: str, name: str, columns: Sequence[tuple[str, str]]
) -> Stage:
    """A table with the system columns and `columns` (field name, type), to be swapped
    in as it is. Logged from the start: the COPYs from the Spark tasks write its WAL in
    parallel, where an unlogged stage was rewritten by `SET LOGGED` in the swap, in one
    backend (20 tables of 25,000 rows: COPY and key 1.7 s logged against 1.1 s unlogged
    plus 1.6 s to set them logged)."""
    stage = Stage(schema, name)
    identifier = stage.identifier
    definitions = [
        sql.SQL("{} {} NOT NULL").format(sql.Identifier(column), sql.SQL(pg_type))
        for column, pg_type in SYSTEM_COLUMNS
    ] + [
        sql.SQL("{} {}").format(sql.Identifier(column), sql.SQL(pg_type))
        for column, pg_type in columns
    ]
    conn.execute(
        sql.SQL("CREATE TABLE {} ({})").format(identifier, sql.SQL(", ").join(definitions))
    )
    return stage


def create_shared_stage(conn: psycopg.Connection, name: str, like: str) -> Stage:
    """A staging table of a run's accounts or deleted sets (all its schemas)."""
    stage = Stage("p2panda", name)
    conn.execute(
        sql.SQL("CREATE UNLOGGED TABLE {} (LIKE {} INCLUDING DEFAULTS)").format(
            stage.identifier, sql.Identifier("p2panda", like)
        )
    )
    return stage


def index_stage(conn: psycopg.Connection, stage: Stage) -> None:
    """The primary key, built once the rows are in (faster than row by row)."""
    conn.execute(
        sql.SQL("ALTER TABLE {} ADD CONSTRAINT {} PRIMARY KEY (_instance_id)").format(
            stage.identifier, sql.Identifier(f"{stage.name}_pkey")
        )
    )


def index_shared_stage(conn: psycopg.Connection, stage: Stage) -> None:
    """An index on `schema_id`, and the planner's statistics, once the rows are in:
    each schema's swap reads its own rows of a stage that holds every schema's (without
    them, 20 swaps at 1M entries scan the whole stage 20 times: 1.3 s each)."""
    conn.execute(
        sql.SQL("CREATE INDEX {} ON {} (schema_id)").format(
            sql.Identifier(f"{stage.name}_schema"), stage.identifier
        )
    )
    conn.execute(sql.SQL("ANALYZE {}").format(stage.identifier))


@dataclass(frozen=True, slots=True)
class Swap:
    """One schema's part of a whole build's swap (`swap_schemas`): its outcome, its
    staged table with its key (None: the lens has no field, so no table), and what it
    was built from."""

    outcome: Outcome
    stage: Stage | None
    state: BuildState | None = None


def swap_schemas(
    conn: psycopg.Connection,
    swaps: Sequence[Swap],
    accounts: Stage,
    deleted: Stage,
    fingerprint: str,
) -> dict[str, psycopg.Error]:
    """Replace each schema's table, its instance accounts, its deleted set and its
    registry row, and the views, in one transaction: readers see every old table or
    every new one. The views are dropped and made once for all the schemas, not once a
    schema: 20 schemas at 100k entries materialized in 6.4-6.5 s against 7.1-7.5 s
    (bench/pipeline.py, three pairs in turn).

    Each schema's part is a savepoint of its own: one that fails (a user's view that
    depends on its table) leaves that schema as it was, and comes back with its error;
    the others are swapped. Rule T-SWAP (docs/semantics.md)."""
    failed: dict[str, psycopg.Error] = {}
    with conn.transaction():
        drop_views(conn)  # they depend on the tables
        for swap in swaps:
            try:
                with conn.transaction():
                    _swap_schema(conn, swap, accounts, deleted, fingerprint)
            except psycopg.Error as error:
                failed[swap.outcome.schema_id] = error
        create_views(conn)
    return failed


def _swap_schema(
    conn: psycopg.Connection, swap: Swap, accounts: Stage, deleted: Stage, fingerprint: str
) -> None:
    outcome = swap.outcome
    replace_table(conn, outcome.table_name, swap.stage)
    accounts_sql.forget_instance_accounts(conn, outcome.schema_id)
    insert_instance_accounts(conn, accounts, outcome.schema_id)
    deleted_sql.forget_deleted_set(conn, outcome.schema_id)
    deleted_sql.add_staged_deleted(conn, deleted.identifier, outcome.schema_id)
    update_registry(conn, outcome, fingerprint, swap.state)
    failpoint(Failpoint.SWAPPING)


def apply_increment(
    conn: psycopg.Connection,
    outcome: Outcome,
    stage: Stage,
    touched: Sequence[bytes],
    deleted: Sequence[bytes],
    accounts: Stage,
    fingerprint: str,
    state: BuildState,
) -> None:
    """Replace the rows of the `touched` instances with the staged ones (the live among
    them), upsert their messages' accounts, add the `deleted` ones to the deleted set,
    and count the rows, in one transaction. The table keeps its name and its views.
    The rows are counted from the registry's count and the rows replaced: counting the
    table read every row of it at each increment (~2 ms a schema of 25,000 rows). The
    count is there: the build that recorded the state an increment starts from wrote it
    (`schemas.record_built_table`)."""
    table = sql.Identifier(*split_table_name(outcome.table_name))
    with conn.transaction():
        before = schemas.built_rows(conn, outcome.schema_id)
        removed = conn.execute(
            sql.SQL("DELETE FROM {} WHERE _instance_id = ANY(%s)").format(table),
            ([t.hex() for t in touched],),
        ).rowcount
        added = conn.execute(
            sql.SQL("INSERT INTO {} SELECT * FROM {}").format(table, stage.identifier)
        ).rowcount
        accounts_sql.upsert_instance_accounts(conn, accounts.identifier, outcome.schema_id)
        deleted_sql.add_deleted(conn, outcome.schema_id, deleted)
        outcome.rows = before - removed + added
        update_registry(conn, outcome, fingerprint, state)
        failpoint(Failpoint.SWAPPING)


def insert_instance_accounts(conn: psycopg.Connection, accounts: Stage, schema_id: str) -> None:
    """The staged accounts of the schema's instance logs into `p2panda.accounts`, once
    its own are deleted (a whole build's swap): then none of them is there, unless
    another schema holds an entry's account (the entry's log was assigned to it before,
    and it was not built since). A plain INSERT is tried first, in a savepoint, and the
    upsert only if it meets such a row: ON CONFLICT probes the key once more for every
    row (1M accounts in 20 schemas: 4.1 s against 5.5 s)."""
    try:
        with conn.transaction():
            accounts_sql.add_instance_accounts(conn, accounts.identifier, schema_id)
    except psycopg.errors.UniqueViolation:
        accounts_sql.upsert_instance_accounts(conn, accounts.identifier, schema_id)


def swap_version(conn: psycopg.Connection, outcome: Outcome, stage: Stage | None) -> None:
    """Replace a version table and its row in `p2panda.schema_versions` (none when the
    version has no field, so no table), and the views, in one transaction."""
    assert outcome.version is not None and outcome.version_hash is not None
    with conn.transaction():
        drop_views(conn)
        replace_table(conn, outcome.table_name, stage)
        if stage is None:
            schema_versions.forget_version(conn, outcome.schema_id, outcome.version)
        else:
            schema_versions.record_version(
                conn,
                outcome.schema_id,
                outcome.version,
                outcome.version_hash,
                outcome.table_name,
                outcome.rows,
            )
        create_views(conn)


def replace_table(conn: psycopg.Connection, table_name: str, stage: Stage | None) -> None:
    """Drop the table, then rename the staging table (in the same schema) and its key
    into their places. In the caller's transaction."""
    schema, name = split_table_name(table_name)
    conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(schema, name)))
    if stage is None:
        return
    conn.execute(
        sql.SQL("ALTER TABLE {} RENAME TO {}").format(stage.identifier, sql.Identifier(name))
    )
    conn.execute(
        sql.SQL("ALTER INDEX {} RENAME TO {}").format(
            sql.Identifier(schema, f"{stage.name}_pkey"), sql.Identifier(f"{name}_pkey")
        )
    )


def storable_text(text: str | None) -> str | None:
    """`text` as a PostgreSQL text value can hold it: U+0000, which a CBOR text string
    may carry and PostgreSQL cannot store, as U+FFFD. Only for what a schema's author
    wrote about it (its description), which is shown, never queried: one such character
    made every write of the registry row fail, and with it the build of every schema
    after it. A field value with U+0000 is rejected instead (`engine.values`): a table
    never holds a changed value."""
    return None if text is None else text.replace("\x00", "\ufffd")


def update_registry(
    conn: psycopg.Connection,
    outcome: Outcome,
    fingerprint: str | None,
    state: BuildState | None = None,
) -> None:
    """The registry row says what the schema's table holds: written in the swap's
    transaction, so the database knows its own versions, also when restored from a
    backup. A schema that waits or failed keeps the version, rows and fallbacks of the
    table it still has. `materialized_at` is the time of the schema's own swap
    (`clock_timestamp()`), not its transaction's start: a whole build swaps all its
    schemas in one transaction, and the registry keeps the order they were built in
    (upstream first), as it did when each had a transaction of its own."""
    schemas.record_outcome(
        conn,
        outcome.schema_id,
        name=outcome.name,
        description=storable_text(outcome.description),
        migrations=outcome.migrations,
        table_name=outcome.table_name,
        status=str(outcome.status),
        status_message=_status_message(outcome),
        upstream=outcome.upstream,
    )
    if outcome.status not in BUILT:
        return
    schemas.record_built_table(
        conn,
        outcome.schema_id,
        version=outcome.version,
        version_hash=outcome.version_hash,
        rows=outcome.rows,
        fallbacks=outcome.fallbacks,
        fingerprint=fingerprint,
        state=None if state is None else _as_written(conn, state).as_json(),
        incremental=outcome.incremental,
        path=None if outcome.path is None else str(outcome.path),
    )


def _as_written(conn: psycopg.Connection, state: BuildState) -> BuildState:
    """`state` with the deleted sets its table's cascades read, as this transaction
    sees them: upstream schemas are written first, so an upstream's new deletes of the
    same run are in them."""
    return replace(state, deleted=deleted_key(conn, state.cascades_from))


def deleted_key(conn: psycopg.Connection, schema_ids: Sequence[str]) -> str:
    """A key of the stored deleted sets of `schema_ids`: each one's size and the newest
    `added` mark of its ids. Ids only join a set (a new one's mark is above every
    other), and a set written again gets new marks: equal keys, equal sets (a table
    whose cascades read them needs no change for them)."""
    if not schema_ids:
        return ""
    marks = _deleted_marks(conn, schema_ids)
    return ";".join("{}={}@{}".format(s, *marks.get(s, (0, 0))) for s in sorted(schema_ids))


def _deleted_marks(
    conn: psycopg.Connection, schema_ids: Sequence[str]
) -> dict[str, tuple[int, int]]:
    rows = conn.execute(
        "SELECT schema_id, count(*), max(added) FROM p2panda.deleted_instances"
        " WHERE schema_id = ANY(%s) GROUP BY schema_id",
        (list(schema_ids),),
    )
    return {schema_id: (int(count), int(mark)) for schema_id, count, mark in rows}


def grown_deletes(
    conn: psycopg.Connection, state: BuildState, sources: Sequence[str]
) -> set[bytes] | None:
    """The ids that joined the deleted sets of `sources` since a table was written with
    them (its `BuildState.deleted`), if the sets only grew since (every id they held then
    is there still: a delete is final); None if one lost or changed an id (rebuilt
    whole, unregistered), or the state names them otherwise (an older key). An
    increment of the table reduces again its rows that point at those ids, instead of
    the whole table: in the stream into the 1M store, a schema whose cascade target was
    built alone took 4-5 s to build whole in Spark."""
    if not sources or state.deleted == deleted_key(conn, sources):
        return set()
    then = _parse_deleted_key(state.deleted)
    if then is None or set(then) != set(sources):
        return None
    grown: set[bytes] = set()
    for schema_id, (count, mark) in then.items():
        row = conn.execute(
            "SELECT count(*) FROM p2panda.deleted_instances WHERE schema_id = %s AND added <= %s",
            (schema_id, mark),
        ).fetchone()
        if row is None or int(row[0]) != count:
            return None
        rows = conn.execute(
            "SELECT instance_id FROM p2panda.deleted_instances WHERE schema_id = %s AND added > %s",
            (schema_id, mark),
        )
        grown.update(bytes(instance_id) for (instance_id,) in rows)
    return grown


def _parse_deleted_key(key: str | None) -> dict[str, tuple[int, int]] | None:
    """`deleted_key`'s text as (size, newest mark) by schema; None for another form."""
    if not key:
        return None
    parsed: dict[str, tuple[int, int]] = {}
    for part in key.split(";"):
        schema_id, equals, mark = part.rpartition("=")
        count, at, newest = mark.partition("@")
        if not equals or not at or not count.isdigit() or not newest.isdigit():
            return None
        parsed[schema_id] = (int(count), int(newest))
    return parsed


def _status_message(outcome: Outcome) -> str | None:
    if not outcome.message:
        return None
    return f"{outcome.reason}: {outcome.message}" if outcome.reason else outcome.message


def record_status(conn: psycopg.Connection, outcome: Outcome) -> None:
    """A schema that waits or failed: its registry row says so (and why); its table, if
    it has one, stays as it was."""
    with conn.transaction():
        drop_views(conn)
        update_registry(conn, outcome, None)
        create_views(conn)


def built_fingerprints(conn: psycopg.Connection, schema_ids: Sequence[str]) -> dict[str, str]:
    """The index fingerprint each schema's current table was built from."""
    rows = conn.execute(
        "SELECT schema_id, built_fingerprint FROM p2panda.schemas WHERE schema_id = ANY(%s)"
        " AND status = ANY(%s) AND built_fingerprint IS NOT NULL",
        (list(schema_ids), [s.value for s in BUILT]),
    )
    return {schema_id: fingerprint for schema_id, fingerprint in rows}


def rows_pointing_at(
    conn: psycopg.Connection,
    table_name: str,
    fields: Sequence[tuple[str, bool]],
    ids: Sequence[str],
) -> set[str]:
    """The rows (instance ids, hex) of a table whose field (name, is a list) holds one
    of `ids` (hex): where a delete among `ids` may cascade to."""
    if not fields or not ids:
        return set()
    tests = [
        sql.SQL("{} && %(ids)s::text[]" if is_list else "{} = ANY(%(ids)s)").format(
            sql.Identifier(name)
        )
        for name, is_list in fields
    ]
    rows = conn.execute(
        sql.SQL("SELECT _instance_id FROM {} WHERE {}").format(
            sql.Identifier(*split_table_name(table_name)), sql.SQL(" OR ").join(tests)
        ),
        {"ids": list(ids)},
    )
    return {instance_id for (instance_id,) in rows}


def build_states(conn: psycopg.Connection, schema_ids: Sequence[str]) -> dict[str, BuildState]:
    """What each schema's current table was built from, where it is recorded and the
    table holds rows (`materialized`): the start of an incremental build."""
    rows = conn.execute(
        "SELECT schema_id, built_state FROM p2panda.schemas WHERE schema_id = ANY(%s)"
        " AND status = %s AND built_state IS NOT NULL",
        (list(schema_ids), BuildStatus.MATERIALIZED.value),
    )
    return {schema_id: BuildState.from_json(state) for schema_id, state in rows}


def cascades_changed(conn: psycopg.Connection, state: BuildState, sources: Sequence[str]) -> bool:
    """Whether the deleted sets of `sources`, which a table's cascades read, differ from
    those it was written with (its `BuildState.deleted`). A build of their schema in another run
    (the sensors and the UI build a schema at a time) may have changed them, and an
    increment reduces again only the rows that new messages reach: a row pointing at an
    instance deleted since would stay."""
    return bool(sources) and state.deleted != deleted_key(conn, sources)


def stale_cascades(conn: psycopg.Connection, schema_ids: Sequence[str]) -> set[str]:
    """Which of `schema_ids` have a table whose cascades read deleted sets that changed
    since it was written (`cascades_changed`): the table needs a build though no entry
    is new."""
    return {
        schema_id
        for schema_id, state in build_states(conn, schema_ids).items()
        if cascades_changed(conn, state, state.cascades_from)
    }


def schemas_holding_messages(conn: psycopg.Connection, schema_ids: Sequence[str]) -> set[str]:
    """Which of `schema_ids` have instance messages held pending: a change anywhere in
    the catalog may release them, so their next build is a whole one."""
    rows = conn.execute(
        "SELECT DISTINCT schema_id FROM p2panda.accounts WHERE schema_id = ANY(%s)"
        " AND origin = 'instance' AND state = 'pending'",
        (list(schema_ids),),
    )
    return {schema_id for (schema_id,) in rows}


def materialized_schemas(conn: psycopg.Connection, schema_ids: Sequence[str]) -> set[str]:
    """Which of `schema_ids` have a table (or were dropped) that dependents can rely on."""
    rows = conn.execute(
        "SELECT schema_id FROM p2panda.schemas WHERE schema_id = ANY(%s)"
        " AND (status = ANY(%s)"
        "      OR (status = %s AND version IS NOT NULL))",  # it keeps its old table
        (list(schema_ids), [s.value for s in BUILT], SchemaStatus.FAILED.value),
    )
    return {schema_id for (schema_id,) in rows}


def deleted_sets(
    conn: psycopg.Connection, schema_ids: Sequence[str], among: Collection[bytes] | None = None
) -> list[tuple[str, bytes]]:
    """(schema, instance id) of every deleted instance of built upstream schemas; with
    `among`, of those instance ids only (found by the primary key, whatever the sets'
    sizes)."""
    if among is None:
        rows = conn.execute(
            "SELECT schema_id, instance_id FROM p2panda.deleted_instances"
            " WHERE schema_id = ANY(%s)",
            (list(schema_ids),),
        )
    else:
        rows = conn.execute(
            "SELECT schema_id, instance_id FROM p2panda.deleted_instances"
            " WHERE schema_id = ANY(%s) AND instance_id = ANY(%s)",
            (list(schema_ids), list(among)),
        )
    return [(schema_id, bytes(instance)) for schema_id, instance in rows]


def registry_outcome(conn: psycopg.Connection, schema_id: str) -> Outcome:
    """The outcome of a schema's last build, as its registry row records it: what a run
    reports whose table an earlier run of its batch built (`unchanged` is only ever a
    built table, so there is no reason to carry)."""
    row = conn.execute(
        "SELECT status, rows, version, version_hash, table_name, upstream, fallbacks,"
        " name, description, migrations, built_incrementally, built_path"
        " FROM p2panda.schemas WHERE schema_id = %s",
        (schema_id,),
    ).fetchone()
    if row is None:
        raise LookupError(f"schema {schema_id} is not registered")
    status, rows, version, version_hash, table, upstream, fallbacks = row[:7]
    return Outcome(
        schema_id,
        BuildStatus(status),
        rows=int(rows or 0),
        version=version,
        version_hash=version_hash,
        table_name=table,
        upstream=tuple(upstream or ()),
        fallbacks=dict(fallbacks or {}),
        name=row[7],
        description=row[8],
        migrations=dict(row[9] or {}),
        incremental=bool(row[10]),
        path=None if row[11] is None else BuildPath(row[11]),
    )


def table_exists(conn: psycopg.Connection, table_name: str) -> bool:
    """Whether a (schema-qualified) table is there: a pending schema keeps the table an
    earlier build left, if any."""
    row = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (table_name,)).fetchone()
    return bool(row and row[0])
