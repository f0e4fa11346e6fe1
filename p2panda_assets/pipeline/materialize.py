"""Materializing one schema: its instance logs reduced in Spark partitions by the
engine's `reduce_instance_log`, cascades applied as a fixpoint of joins, and the table,
its accounts, its deleted set, its registry row and the views by name replaced in one
transaction (readers see the old table or the new one, never half of one).

The same steps build a lens in time (`as_of`): the table as it was at an older version
of the schema, beside the current one, from the same immutable messages.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from decimal import Decimal

import pandas as pd
import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb
from pyspark.broadcast import Broadcast
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from p2panda_assets.engine.compatibility import history_compatibility
from p2panda_assets.engine.corpus import (
    Catalog,
    applied_if_live,
    reduce_instance_log,
    reduction_accounts,
)
from p2panda_assets.engine.instances import Instance
from p2panda_assets.engine.lens import Lens
from p2panda_assets.engine.relations import BuildOrder, relation_target
from p2panda_assets.errors import Reason
from p2panda_assets.pipeline.columns import (
    SYSTEM_COLUMNS_PG,
    field_columns,
    pg_type,
    rows_frame,
    spark_type,
    spark_value,
)
from p2panda_assets.pipeline.decoded import items_log
from p2panda_assets.pipeline.index import UPSERT_ACCOUNTS, account_rows
from p2panda_assets.pipeline.jdbc import Jdbc, append, read_query, require_autocommit
from p2panda_assets.protocol.fieldtypes import FieldType
from p2panda_assets.protocol.log import Rejection
from p2panda_assets.store.registry import table_name_for, version_table_name_for
from p2panda_assets.store.views import create_views, drop_views

SCHEMA_ID = re.compile(r"^[0-9a-f]{64}-[0-9]{1,20}$")


@dataclass(slots=True)
class Outcome:
    """What one materialization did, for the registry, the CLI and Dagster metadata."""

    schema_id: str
    status: str  # materialized | dropped | waiting
    message: str = ""
    rows: int = 0
    version: int | None = None
    version_hash: str | None = None
    table_name: str = ""
    upstream: tuple[str, ...] = ()
    fallbacks: dict[str, int] = field(default_factory=dict)


def checked_schema_id(schema_id: str) -> str:
    """Schema ids reach SQL text only after this check (they are hex and digits)."""
    if not SCHEMA_ID.match(schema_id):
        raise ValueError(f"not a schema id: {schema_id!r}")
    return schema_id


def reduce_schema_type(catalog: Catalog, schema_id: str) -> T.StructType:
    """The rows `_reduce_group` returns: instance rows and account rows in one frame."""
    fields = [
        T.StructField("row_type", T.StringType()),
        T.StructField("hash", T.BinaryType()),
        T.StructField("author", T.BinaryType()),
        T.StructField("version", T.LongType()),
        T.StructField("seq", T.DecimalType(20, 0)),
        T.StructField("deleted", T.BooleanType()),
        T.StructField("fell_back", T.ArrayType(T.StringType())),
        T.StructField("cascade_target", T.ArrayType(T.StringType())),
        T.StructField("cascade_ref", T.ArrayType(T.BinaryType())),
        T.StructField("messages", T.ArrayType(T.BinaryType())),
        T.StructField("shaping", T.ArrayType(T.BinaryType())),
        T.StructField("schema_id", T.StringType()),
        T.StructField("state", T.StringType()),
        T.StructField("reason", T.StringType()),
        T.StructField("message", T.StringType()),
    ]
    lens = catalog.histories[schema_id].lens
    fields += [T.StructField(column, spark_type(ftype)) for column, _, ftype in field_columns(lens)]
    return T.StructType(fields)


def _instance_row(catalog: Catalog, schema_id: str, instance: Instance) -> dict[str, object]:
    history = catalog.histories[schema_id]
    targets, refs = [], []
    for spec in history.lens.values():
        if spec.relation is None or not spec.cascade:
            continue
        value = instance.values.get(spec.name)
        for hex_id in value if isinstance(value, tuple) else (value,):
            if isinstance(hex_id, str):
                targets.append(relation_target(spec.relation, catalog.hash_index))
                refs.append(bytes.fromhex(hex_id))
    row: dict[str, object] = {
        "row_type": "instance",
        "hash": instance.id,
        "author": instance.author,
        "version": instance.version,
        "seq": Decimal(instance.seq),
        "deleted": instance.deleted_by is not None,
        "fell_back": sorted(instance.fell_back),
        "cascade_target": targets,
        "cascade_ref": refs,
        "messages": instance.messages,
        "shaping": sorted(applied_if_live(instance, history.lens)),
    }
    for column, name, ftype in field_columns(history.lens):
        row[column] = spark_value(instance.values.get(name), ftype)
    return row


def _reduce_rows(catalog: Catalog, schema_id: str, owners: dict, pdf: pd.DataFrame) -> list[dict]:
    log = items_log(pdf)
    reduction = reduce_instance_log(catalog, schema_id, log, owners.get)
    rows = [_instance_row(catalog, schema_id, i) for i in reduction.instances.values()]
    for row in account_rows(reduction_accounts(reduction, schema_id)):
        rows.append({"row_type": "account", **row})
    return rows


def materialize_schema(
    spark: SparkSession,
    conn: psycopg.Connection,
    jdbc: Jdbc,
    schema_id: str,
    catalog: Catalog,
    order: BuildOrder,
    decoded: DataFrame | None,
    as_of: int | None = None,
) -> Outcome:
    """Materialize `schema_id` from its decoded messages (`decoded.decode_schema`).

    With `as_of`, `catalog` holds the schema's log cut at that version
    (`index.stored_catalog(conn, cut=...)`), and the table goes to `p2panda_versions`;
    the current table, its accounts, deleted set and registry row stay as they are."""
    require_autocommit(conn)
    schema_id = checked_schema_id(schema_id)
    table_name = (
        table_name_for(schema_id) if as_of is None else version_table_name_for(schema_id, as_of)
    )
    upstream = order.upstream.get(schema_id, ())
    why = _why_waiting(conn, catalog, order, schema_id, upstream)
    if why is not None:
        outcome = Outcome(
            schema_id, "waiting", f"{why.reason}: {why.message}", table_name=table_name
        )
        _versions(outcome, catalog)
        if as_of is None:
            with conn.transaction():
                drop_views(conn)
                _update_registry(conn, outcome, catalog)
                create_views(conn)
        return outcome
    assert decoded is not None, "a schema in the build order has decoded messages"
    history = catalog.histories[schema_id]
    broadcast = spark.sparkContext.broadcast((catalog, schema_id, _owners(conn, schema_id)))
    reduced = _reduce(decoded, broadcast, reduce_schema_type(catalog, schema_id)).cache()
    instances = reduced.filter(F.col("row_type") == "instance")
    targets = cascade_targets(catalog, schema_id)
    deleted = _cascade(spark, jdbc, schema_id, instances, targets, upstream)
    flagged = (
        instances.join(deleted.withColumn("gone", F.lit(True)), "hash", "left")
        .withColumn("live", F.col("gone").isNull())
        .cache()
    )
    outcome = Outcome(
        schema_id,
        "materialized" if history.lens else "dropped",
        table_name=table_name,
        upstream=upstream,
    )
    _versions(outcome, catalog)
    staged = _Staged()
    try:
        if as_of is None:
            _stage_accounts(conn, jdbc, staged, schema_id, reduced, flagged)
            staged.deleted = _stage(conn, "p2panda", "instance_id bytea")
            append(
                deleted.select(F.col("hash").alias("instance_id")),
                jdbc,
                staged.name(conn, "deleted"),
            )
        if history.lens:
            _stage_rows(conn, jdbc, staged, history.lens, flagged, outcome)
        if as_of is None:
            _swap(conn, outcome, catalog, staged, field_columns(history.lens))
        else:
            _swap_version(conn, outcome, staged, field_columns(history.lens))
    except BaseException:
        _drop(conn, staged)  # a failed run leaves the previous table and no litter
        raise
    finally:
        reduced.unpersist()
        flagged.unpersist()
        broadcast.unpersist()
    return outcome


def _why_waiting(
    conn: psycopg.Connection,
    catalog: Catalog,
    order: BuildOrder,
    schema_id: str,
    upstream: tuple[str, ...],
) -> Rejection | None:
    """Why the schema cannot be built now: not in the build order, or an upstream schema
    not materialized yet (its deleted set, which cascades read, would be missing). The
    sensors and `panda materialize` order runs upstream first; this guards runs launched
    by hand."""
    if schema_id not in order.order:
        return catalog.not_built(schema_id, order)
    others = [s for s in upstream if s != schema_id]
    if not others:
        return None
    built = {
        s
        for (s,) in conn.execute(
            "SELECT schema_id FROM p2panda.schemas WHERE schema_id = ANY(%s)"
            " AND status IN ('materialized', 'dropped')",
            (others,),
        )
    }
    missing = sorted(set(others) - built)
    if missing:
        return Rejection(
            Reason.AWAITING_SCHEMA, f"upstream schema {missing[0]} is not materialized yet"
        )
    return None


def _versions(outcome: Outcome, catalog: Catalog) -> None:
    """The registry keeps the schema's current version, built or waiting."""
    history = catalog.histories.get(outcome.schema_id)
    latest = history.latest if history else None
    if latest is not None:
        outcome.version, outcome.version_hash = latest.seq, latest.hash.hex()


@dataclass(slots=True)
class _Staged:
    """One run's staging tables (None until created)."""

    accounts: sql.Composed | None = None
    deleted: sql.Composed | None = None
    table: sql.Composed | None = None

    def name(self, conn: psycopg.Connection, which: str) -> str:
        return getattr(self, which).as_string(conn)


def _reduce(decoded: DataFrame, broadcast: Broadcast, result_type: T.StructType) -> DataFrame:
    """Every instance log of the schema through the engine, one Spark group per log."""
    names = result_type.fieldNames()

    def reduce_group(pdf: pd.DataFrame) -> pd.DataFrame:
        catalog, schema_id, owners = broadcast.value
        return rows_frame(_reduce_rows(catalog, schema_id, owners, pdf), names)

    instance_logs = decoded.filter(~F.col("is_schema_log"))
    return instance_logs.groupBy("author", "log_id").applyInPandas(reduce_group, result_type)


def _stage_accounts(
    conn: psycopg.Connection,
    jdbc: Jdbc,
    staged: _Staged,
    schema_id: str,
    reduced: DataFrame,
    flagged: DataFrame,
) -> None:
    """The accounts of the schema's instance logs: rejected, pending and delete entries
    from the reduction; the messages of each instance applied or superseded, by whether
    the instance survived the cascades and whether the message still shapes it."""
    staged.accounts = _stage(
        conn,
        "p2panda",
        "hash bytea, schema_id text, state text, reason text, message text, origin text",
    )
    from_reduction = reduced.filter(F.col("row_type") == "account").select(
        "hash", "schema_id", "state", "reason", "message"
    )
    shaped = F.col("live") & F.array_contains("shaping", F.col("m"))
    from_instances = flagged.select(F.explode("messages").alias("m"), "live", "shaping").select(
        F.col("m").alias("hash"),
        F.lit(schema_id).alias("schema_id"),
        F.when(shaped, "applied").otherwise("superseded").alias("state"),
        F.lit(None).cast("string").alias("reason"),
        F.lit("").alias("message"),
    )
    accounts = from_reduction.unionByName(from_instances).withColumn("origin", F.lit("instance"))
    append(accounts, jdbc, staged.name(conn, "accounts"))


def _stage_rows(
    conn: psycopg.Connection,
    jdbc: Jdbc,
    staged: _Staged,
    lens: Lens,
    flagged: DataFrame,
    outcome: Outcome,
) -> None:
    """The live instances as rows of a staging table with the exact column types."""
    columns = field_columns(lens)
    definitions = [f"{n} {t}" for n, t in SYSTEM_COLUMNS_PG] + [
        f"{c} {pg_type(f)}" for c, _, f in columns
    ]
    staged.table = _stage(conn, outcome.table_name.split(".")[0], ", ".join(definitions))
    live = flagged.filter("live")
    rows = live.select(
        F.lower(F.hex("hash")).alias("_instance_id"),
        F.lower(F.hex("author")).alias("_author"),
        F.col("version").alias("_version"),
        F.col("seq").alias("_seq"),
        F.lower(F.hex(F.element_at("messages", -1))).alias("_entry"),
        *[c for c, _, _ in columns],
    )
    append(rows, jdbc, staged.name(conn, "table"))
    outcome.fallbacks = _fallbacks(live, [n for _, n, _ in columns])
    outcome.rows = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(staged.table)).fetchone()[
        0
    ]


def _drop(conn: psycopg.Connection, staged: _Staged) -> None:
    for name in (staged.accounts, staged.deleted, staged.table):
        if name is not None:
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(name))


def _fallbacks(live: DataFrame, names: list[str]) -> dict[str, int]:
    counted = dict.fromkeys(names, 0)
    for row in live.select(F.explode("fell_back").alias("f")).groupBy("f").count().collect():
        if row["f"] in counted:
            counted[row["f"]] = row["count"]
    return counted


def _owners(conn: psycopg.Connection, schema_id: str) -> dict[bytes, tuple[bytes, int]]:
    """Creates (anywhere, chain-accepted) that the schema's updates and deletes name:
    the engine's owner lookup, for `not-author` and `wrong-schema`. Small."""
    rows = conn.execute(
        """
        SELECT DISTINCT c.hash, ce.author, ce.log_id
        FROM p2panda.message_index m
        JOIN p2panda.entries e ON e.hash = m.hash
        JOIN p2panda.logs l ON l.author = e.author AND l.log_id = e.log_id
        JOIN p2panda.message_index c ON c.hash = m.instance AND c.kind = 'create'
        JOIN p2panda.entries ce ON ce.hash = c.hash
        WHERE l.schema_id = %s AND l.assignment = 'assigned' AND m.kind IN ('update', 'delete')
          AND NOT EXISTS (
            SELECT 1 FROM p2panda.accounts a WHERE a.hash = c.hash AND a.origin = 'chain'
          )
        """,
        (schema_id,),
    ).fetchall()
    return {bytes(h): (bytes(a), int(log)) for h, a, log in rows}


def cascade_targets(catalog: Catalog, schema_id: str) -> set[str]:
    """The schemas the current lens's cascade relation fields point at."""
    return {
        relation_target(spec.relation, catalog.hash_index)
        for spec in catalog.histories[schema_id].lens.values()
        if spec.relation is not None and spec.cascade
    }


def _cascade(
    spark: SparkSession,
    jdbc: Jdbc,
    schema_id: str,
    instances: DataFrame,
    targets: set[str],
    upstream: tuple[str, ...],
) -> DataFrame:
    """Every deleted instance id (column `hash`): deleted by a message, or pointing along
    a cascade relation at a deleted instance, upstream (final sets, from the store) or in
    this schema (iterated to a fixpoint), as `engine.cascade.apply_cascades` does. Only
    the joins the cascade `targets` need are run: each is a Spark job or more."""
    deleted = instances.filter("deleted").select("hash")
    others = [checked_schema_id(s) for s in upstream if s != schema_id and s in targets]
    if not others and schema_id not in targets:
        return deleted
    refs = (
        instances.select(
            "hash", F.explode(F.arrays_zip("cascade_target", "cascade_ref")).alias("c")
        )
        .select(
            "hash", F.col("c.cascade_target").alias("target"), F.col("c.cascade_ref").alias("ref")
        )
        .cache()
    )
    if others:
        listed = ", ".join(f"'{s}'" for s in others)
        gone = read_query(
            spark,
            jdbc,
            "SELECT schema_id AS target, instance_id AS ref FROM p2panda.deleted_instances"
            f" WHERE schema_id IN ({listed})",
        )
        deleted = deleted.union(
            refs.join(gone, ["target", "ref"], "left_semi").select("hash")
        ).distinct()
    deleted = deleted.distinct().cache()
    if schema_id not in targets:
        return deleted
    own = refs.filter(F.col("target") == schema_id).select("hash", "ref").cache()
    while True:
        reached = own.join(deleted.select(F.col("hash").alias("ref")), "ref", "left_semi").select(
            "hash"
        )
        new = reached.join(deleted, "hash", "left_anti").distinct().cache()
        if new.isEmpty():
            break
        deleted = deleted.union(new).cache()
    return deleted


def _stage(conn: psycopg.Connection, schema: str, columns: str) -> sql.Composed:
    name = sql.Identifier(schema, f"stage_{uuid.uuid4().hex[:16]}")
    conn.execute(sql.SQL("CREATE UNLOGGED TABLE {} (" + columns + ")").format(name))
    return name


def _swap(
    conn: psycopg.Connection,
    outcome: Outcome,
    catalog: Catalog,
    staged: _Staged,
    columns: list[tuple[str, str, FieldType]],
) -> None:
    """Replace the table, the schema's instance accounts, its deleted set, its registry
    row and the views in one transaction: readers see the old table or the new one."""
    with conn.transaction():
        drop_views(conn)  # they depend on the table
        _replace_table(conn, outcome.table_name, staged, columns)
        conn.execute(
            "DELETE FROM p2panda.accounts WHERE origin = 'instance' AND schema_id = %s",
            (outcome.schema_id,),
        )
        conn.execute(
            sql.SQL(
                "INSERT INTO p2panda.accounts (hash, schema_id, state, reason, message, origin)"
                " SELECT hash, schema_id, state, reason, message, origin FROM {}" + UPSERT_ACCOUNTS
            ).format(staged.accounts)
        )
        conn.execute(
            "DELETE FROM p2panda.deleted_instances WHERE schema_id = %s", (outcome.schema_id,)
        )
        conn.execute(
            sql.SQL(
                "INSERT INTO p2panda.deleted_instances (schema_id, instance_id)"
                " SELECT %s, instance_id FROM {}"
            ).format(staged.deleted),
            (outcome.schema_id,),
        )
        conn.execute(sql.SQL("DROP TABLE {}, {}").format(staged.accounts, staged.deleted))
        _update_registry(conn, outcome, catalog)
        create_views(conn)


def _swap_version(
    conn: psycopg.Connection,
    outcome: Outcome,
    staged: _Staged,
    columns: list[tuple[str, str, FieldType]],
) -> None:
    """Replace the version table and its row in `p2panda.schema_versions` (none when the
    version has no field, so no table), and the views, in one transaction."""
    assert outcome.version is not None and outcome.version_hash is not None
    with conn.transaction():
        drop_views(conn)
        _replace_table(conn, outcome.table_name, staged, columns)
        if staged.table is None:
            conn.execute(
                "DELETE FROM p2panda.schema_versions WHERE schema_id = %s AND version = %s",
                (outcome.schema_id, outcome.version),
            )
        else:
            conn.execute(
                """
                INSERT INTO p2panda.schema_versions
                    (schema_id, version, version_hash, table_name, rows)
                VALUES (%s, %s, %s, %s, %s)
                ON CONFLICT (schema_id, version) DO UPDATE
                    SET version_hash = EXCLUDED.version_hash, rows = EXCLUDED.rows,
                        materialized_at = now()
                """,
                (
                    outcome.schema_id,
                    outcome.version,
                    outcome.version_hash,
                    outcome.table_name,
                    outcome.rows,
                ),
            )
        create_views(conn)


def _replace_table(
    conn: psycopg.Connection,
    table_name: str,
    staged: _Staged,
    columns: list[tuple[str, str, FieldType]],
) -> None:
    """Drop the table, then rename the staging table (in the same schema) into its place,
    its field columns to the field names. In the caller's transaction."""
    target_schema, target_name = table_name.split(".")
    target = sql.Identifier(target_schema, target_name)
    conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(target))
    if staged.table is None:
        return
    conn.execute(sql.SQL("ALTER TABLE {} SET LOGGED").format(staged.table))
    rename = sql.SQL("ALTER TABLE {} RENAME TO {}")
    conn.execute(rename.format(staged.table, sql.Identifier(target_name)))
    for column, name, _ in columns:
        rename_column = sql.SQL("ALTER TABLE {} RENAME COLUMN {} TO {}")
        conn.execute(rename_column.format(target, sql.Identifier(column), sql.Identifier(name)))


def _update_registry(conn: psycopg.Connection, outcome: Outcome, catalog: Catalog) -> None:
    """The registry row says what the schema's table holds: written in the swap's
    transaction, so the database knows its own versions, also when restored from a
    backup. A schema that waits keeps the version, rows and fallbacks of the table it
    still has."""
    history = catalog.histories.get(outcome.schema_id)
    meta = history.latest.meta if history and history.latest else None
    classes = history_compatibility(history) if history else {}
    conn.execute(
        """
        UPDATE p2panda.schemas SET name = %s, description = %s, migrations = %s,
          table_name = %s, status = %s, status_message = %s, upstream = %s
        WHERE schema_id = %s
        """,
        (
            history.name if history else None,
            meta.description if meta else None,
            Jsonb({str(seq): str(c.kind) for seq, c in classes.items()}),
            outcome.table_name,
            outcome.status,
            outcome.message or None,
            list(outcome.upstream),
            outcome.schema_id,
        ),
    )
    if outcome.status == "waiting":
        return
    conn.execute(
        """
        UPDATE p2panda.schemas SET version = %s, version_hash = %s, rows = %s, fallbacks = %s,
          materialized_at = now()
        WHERE schema_id = %s
        """,
        (
            outcome.version,
            outcome.version_hash,
            outcome.rows,
            Jsonb(outcome.fallbacks),
            outcome.schema_id,
        ),
    )
