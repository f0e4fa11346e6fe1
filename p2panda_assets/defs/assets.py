"""The asset family of one schema partition:

    raw_entries -> decoded_messages -> migration_plan -> materialized_table

`raw_entries` brings the entry store's index up to date (verification happens once per
entry, ever, whichever partition runs first); the rest is per schema. Relations are
ordered by the caller (`panda materialize`, the sensors): a partition cannot depend on
another partition of the same asset, so a schema whose upstream is not materialized
records that it waits instead of building a table.
"""

from dataclasses import dataclass

import dagster as dg
from dagster_pyspark import PySparkResource
from pyspark.sql import functions as F

from p2panda_assets.defs.partitions import schemas
from p2panda_assets.defs.resources import PostgresResource
from p2panda_assets.engine.compatibility import history_compatibility
from p2panda_assets.engine.corpus import Catalog
from p2panda_assets.engine.relations import BuildOrder
from p2panda_assets.pipeline.columns import SYSTEM_COLUMNS_PG, column_type, pg_type
from p2panda_assets.pipeline.decoded import decode_schema, decoded_path
from p2panda_assets.pipeline.index import run_index, stored_catalog
from p2panda_assets.pipeline.materialize import checked_schema_id, materialize_schema

GROUP = "p2panda"


@dataclass(frozen=True, slots=True)
class MigrationPlan:
    """What a schema's materialization needs to know of all schemas: the catalog (every
    schema log folded) and the build order of the registered schemas."""

    schema_id: str
    catalog: Catalog
    order: BuildOrder


@dg.asset(partitions_def=schemas, group_name=GROUP, kinds={"spark", "postgres"})
def raw_entries(
    context: dg.AssetExecutionContext, pyspark: PySparkResource, postgres: PostgresResource
) -> dg.MaterializeResult:
    """The verified, chained entry store: new entries verified once, every log chained
    and assigned to its schema."""
    schema_id = checked_schema_id(context.partition_key)
    with postgres.connect() as conn:
        result = run_index(pyspark.spark_session, conn, postgres.jdbc())
        entries = conn.execute(
            "SELECT count(*) FROM p2panda.entries e JOIN p2panda.logs l "
            "ON e.author = l.author AND e.log_id = l.log_id WHERE l.schema_id = %s",
            (schema_id,),
        ).fetchone()[0]
    return dg.MaterializeResult(
        metadata={
            "entries": entries,
            "verified_now": result.verified,
            "logs_in_store": result.logs,
            "index_up_to_date": result.up_to_date,
        }
    )


@dg.asset(partitions_def=schemas, group_name=GROUP, deps=[raw_entries], kinds={"spark", "parquet"})
def decoded_messages(
    context: dg.AssetExecutionContext, pyspark: PySparkResource, postgres: PostgresResource
) -> dg.MaterializeResult:
    """The schema's log and instance logs, chained and decoded, one row per accepted entry."""
    schema_id = checked_schema_id(context.partition_key)
    frame = decode_schema(pyspark.spark_session, postgres.jdbc(), schema_id)
    by_kind = frame.groupBy("kind").agg(F.count(F.lit(1)).alias("n"), F.count("error").alias("e"))
    counted = by_kind.collect()  # one job: every Spark job costs ~0.1 s on the way to a row
    kinds = {r["kind"] or "undecodable": r["n"] for r in counted}
    errors = sum(r["e"] for r in counted)
    return dg.MaterializeResult(
        metadata={
            "path": dg.MetadataValue.path(str(decoded_path(schema_id))),
            "messages": sum(kinds.values()),
            "by_kind": dg.MetadataValue.json(kinds),
            "undecodable": errors,
        }
    )


@dg.asset(partitions_def=schemas, group_name=GROUP, deps=[decoded_messages], kinds={"python"})
def migration_plan(context: dg.AssetExecutionContext, postgres: PostgresResource) -> MigrationPlan:
    """The schema log folded into versions (lenses), with the revert rule applied, and
    where this schema stands in the relation order."""
    schema_id = checked_schema_id(context.partition_key)
    with postgres.connect() as conn:
        catalog = stored_catalog(conn)
    order = catalog.order()
    history = catalog.histories.get(schema_id)
    metadata: dict[str, object] = {
        "upstream": dg.MetadataValue.json(list(order.upstream.get(schema_id, ())))
    }
    if history is not None and history.latest is not None:
        metadata |= {
            "version": history.latest.seq,
            "version_hash": history.latest.hash.hex(),
            "dead_versions": dg.MetadataValue.json(sorted(history.dead)),
            "rejected_versions": dg.MetadataValue.json(
                {str(seq): str(r.reason) for seq, r in history.rejected.items()}
            ),
            "migrations": dg.MetadataValue.json(
                {
                    str(seq): {
                        "class": str(c.kind),
                        "changes": [change.line for change in c.changes],
                    }
                    for seq, c in history_compatibility(history).items()
                }
            ),
            "lens": dg.TableSchema(
                columns=[
                    dg.TableColumn(name, pg_type(spec.type)) for name, spec in history.lens.items()
                ]
            ),
        }
    if schema_id not in order.order:
        why = catalog.not_built(schema_id, order)
        metadata["waiting"] = f"{why.reason}: {why.message}"
    context.add_output_metadata(metadata)
    return MigrationPlan(schema_id, catalog, order)


@dg.asset(
    partitions_def=schemas,
    group_name=GROUP,
    deps=[decoded_messages],
    kinds={"spark", "postgres"},
    output_required=False,
)
def materialized_table(
    context: dg.AssetExecutionContext,
    migration_plan: MigrationPlan,
    pyspark: PySparkResource,
    postgres: PostgresResource,
):
    """The schema's PostgreSQL table, swapped in atomically. A schema that waits for an
    upstream schema (or sits in a relation cycle) yields no materialization."""
    schema_id = checked_schema_id(context.partition_key)
    spark = pyspark.spark_session
    decoded = spark.read.parquet(str(decoded_path(schema_id)))
    with postgres.connect() as conn:
        outcome = materialize_schema(
            spark,
            conn,
            postgres.jdbc(),
            schema_id,
            migration_plan.catalog,
            migration_plan.order,
            decoded,
        )
    if outcome.status == "waiting":
        context.log.warning(f"{schema_id} waits: {outcome.message}")
        return
    history = migration_plan.catalog.histories[schema_id]
    yield dg.MaterializeResult(
        metadata={
            "status": outcome.status,
            "table": outcome.table_name,
            "dagster/row_count": outcome.rows,
            "version": outcome.version,
            "version_hash": outcome.version_hash,
            "upstream_schemas": dg.MetadataValue.json(list(outcome.upstream)),
            "fallbacks": dg.MetadataValue.json(outcome.fallbacks),
            "fell_back": sum(outcome.fallbacks.values()),
            "dagster/column_schema": dg.TableSchema(
                columns=[dg.TableColumn(name, column_type(pg)) for name, pg in SYSTEM_COLUMNS_PG]
                + [dg.TableColumn(name, pg_type(spec.type)) for name, spec in history.lens.items()]
            ),
        }
    )


family = [raw_entries, decoded_messages, migration_plan, materialized_table]
QUEUE_TAG = {"p2panda/queue": "pipeline"}  # the pipeline's runs, one at a time (dagster.yaml)
# One process per run: the steps share one Spark session instead of starting one each
# (seconds per step), which the latency goal of the sensors needs.
materialize_schema_job = dg.define_asset_job(
    "materialize_schema",
    selection=dg.AssetSelection.assets(*family),
    executor_def=dg.in_process_executor,
)
