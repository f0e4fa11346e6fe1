"""The asset family of one schema partition:

    raw_entries -> decoded_messages -> migration_plan -> materialized_table

`raw_entries` verifies new entries (once per entry, ever, whichever partition runs
first) and indexes the store: every log chained and assigned, the chained messages
written to the columnar store by schema. The rest is per schema. Relations are ordered by
the caller (`panda materialize`, the sensors): a partition cannot depend on another
partition of the same asset, so a schema whose upstream is not materialized records
that it is pending instead of building a table.

Many schemas in one Spark job: a run names the schemas it is built with (the tag
`p2panda/batch`, which `panda materialize` and the sensors set, or the partitions of the
backfill it belongs to). The first run of a batch builds every schema of the batch that
is not up to date in one job, upstream first; the runs of the others find their table
built from the same index and report it. A live run also brings every table that only
grew up to date (`companions`). A schema is built beside the run's own only once its
messages passed the blocking decoded check, which the run's check makes for them.
Each partition's own run reports its own outcome: built, pending (with its reason) or
failed.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import dagster as dg
import psycopg
from dagster_pyspark import PySparkResource
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from p2panda_assets.defs.partitions import BUILT_FROM, schema_id_of, schemas
from p2panda_assets.defs.resources import PostgresResource
from p2panda_assets.engine.compatibility import history_compatibility
from p2panda_assets.engine.corpus import Catalog
from p2panda_assets.engine.relations import BuildOrder
from p2panda_assets.errors import P2pandaError, Reason
from p2panda_assets.pipeline.build.columns import pg_type
from p2panda_assets.pipeline.build.increments import only_grown
from p2panda_assets.pipeline.columnar.arrow_io import LocalReadUnavailable, kinds_counted, say_once
from p2panda_assets.pipeline.columnar.layers import decoded_layers_of, read_schema_layers
from p2panda_assets.pipeline.index.step import last_index, run_index
from p2panda_assets.pipeline.materialize import materialize_schemas
from p2panda_assets.pipeline.spark.watchdog import watched
from p2panda_assets.protocol.ids import checked_schema_id
from p2panda_assets.statuses import BUILT, BuildStatus
from p2panda_assets.store.catalog import registered_schemas, stored_catalog
from p2panda_assets.store.checked_layers import checked_layers_of
from p2panda_assets.store.registry import schema_entry_count, shown_name_of, shown_names_of
from p2panda_assets.store.tables import SYSTEM_COLUMNS, registry_outcome, table_exists

BATCH_TAG = "p2panda/batch"  # comma-separated schema ids built together with this one
SCHEMA_TAG = "p2panda/schema"  # the schema's name, on every run of its family
VERSION_TAG = "p2panda/version"  # its current version, as the run's index found it
BACKFILL_TAG = "dagster/backfill"
# On a live run (the listener's, the entries sensor's): every entry up to this
# ingest_seq had committed before the run left the queue (`defs.sensors.coverage`).
THROUGH_TAG = "p2panda/entries-through"

GROUP = "p2panda"


@dataclass(frozen=True, slots=True)
class MigrationPlan:
    """What a schema's materialization needs to know of all schemas: the catalog (every
    schema log folded) and the build order of the registered schemas."""

    schema_id: str
    catalog: Catalog
    order: BuildOrder


def registered_partition(conn: psycopg.Connection, key: str) -> str:
    """The registered schema the partition `key` names. One that names none (a partition
    added by hand, as the UI's backfill dialog offers) fails its run with the reason as
    the message and as `reason` metadata, before any work: never an error from deep
    inside the pipeline."""
    try:
        schema_id = checked_schema_id(schema_id_of(key))
    except P2pandaError as error:
        why = f"partition {key!r} names no schema: {error.message}"
        raise partition_failure(Reason.UNKNOWN_SCHEMA, why) from None
    if schema_id not in registered_schemas(conn):
        why = f"{schema_id} is not registered (panda register AUTHOR_HEX LOG_ID)"
        raise partition_failure(Reason.AWAITING_SCHEMA, why)
    return schema_id


def partition_failure(reason: Reason, message: str) -> dg.Failure:
    """A run's failure that says why in its message (as `error: <reason>: ...` does) and
    in `reason` metadata, which `panda materialize` reads (`orchestration.run_failure`)."""
    return dg.Failure(f"{reason}: {message}", metadata={"reason": str(reason)})


@dg.asset(partitions_def=schemas, group_name=GROUP, kinds={"spark", "postgres"})
def raw_entries(
    context: dg.AssetExecutionContext, pyspark: PySparkResource, postgres: PostgresResource
) -> dg.MaterializeResult:
    """The verified, chained entry store: new entries verified once, every log chained
    and assigned to its schema."""
    with postgres.connect() as conn:
        schema_id = registered_partition(conn, context.partition_key)
        result = run_index(pyspark.spark_session, conn, postgres.resolved_url())
        entries = schema_entry_count(conn, schema_id)
        name = name_the_run(context, conn, schema_id, result.catalog)
    return dg.MaterializeResult(
        metadata={
            "schema_name": name,
            "entries": entries,
            "verified_now": result.verified,
            "logs_in_store": result.logs,
            "index_up_to_date": result.up_to_date,
            # Where the index step ran: Spark jobs, or the driver path for few entries
            # (pipeline.index.paths); none when nothing was new.
            "index_path": str(result.path) if result.path is not None else "none",
            # Why this step chained every log again instead of appending; "" if it did not.
            "index_chained_all_because": result.chained_all or "",
        }
    )


@dataclass(frozen=True, slots=True)
class Decoded:
    """A partition's decoded messages as the index steps wrote them."""

    schema_id: str
    name: str  # the schema's shown name (its id if it has none)
    paths: list[str]  # one directory per chained layer holding some; none: no messages
    layers: tuple[str, ...]  # the names of those layers, in the order of `paths`

    def frame(self, spark: SparkSession) -> DataFrame | None:
        return read_schema_layers(spark, self.paths)

    def without(self, layers: set[str]) -> "Decoded":
        """The messages of the other layers only."""
        kept = [(layer, path) for layer, path in zip(self.layers, self.paths, strict=True)]
        kept = [(layer, path) for layer, path in kept if layer not in layers]
        return replace(
            self, paths=[path for _, path in kept], layers=tuple(layer for layer, _ in kept)
        )


def decoded_of(partition_key: str, pyspark: PySparkResource, postgres: PostgresResource) -> Decoded:
    """The partition's decoded messages: read by the asset and by its check."""
    with postgres.connect() as conn:
        return decoded_set(pyspark.spark_session, conn, registered_partition(conn, partition_key))


def decoded_set(spark: SparkSession, conn: psycopg.Connection, schema_id: str) -> Decoded:
    """The decoded messages of the registered schema `schema_id`."""
    return decoded_sets(spark, conn, [schema_id])[schema_id]


def decoded_sets(
    spark: SparkSession, conn: psycopg.Connection, schema_ids: Sequence[str]
) -> dict[str, Decoded]:
    """`decoded_set` of each of `schema_ids`, from one read of the progress row."""
    names = shown_names_of(conn, schema_ids)
    found = {}
    for schema_id, layers in decoded_layers_of(spark, conn, schema_ids).items():
        name = names.get(schema_id) or schema_id
        found[schema_id] = Decoded(schema_id, name, list(layers.values()), tuple(layers))
    return found


@dg.asset(partitions_def=schemas, group_name=GROUP, deps=[raw_entries], kinds={"spark", "parquet"})
def decoded_messages(
    context: dg.AssetExecutionContext, pyspark: PySparkResource, postgres: PostgresResource
) -> dg.MaterializeResult:
    """The schema's log and instance logs, chained and decoded, one row per accepted entry,
    in the columnar store (written by the index step)."""
    decoded = decoded_of(context.partition_key, pyspark, postgres)
    name = decoded.name
    if not decoded.paths:
        return dg.MaterializeResult(metadata={"schema_name": name, "messages": 0})
    counted = _kinds_counted(decoded, pyspark.spark_session)
    kinds = {kind or "undecodable": n for kind, (n, _) in counted.items()}
    errors = sum(e for _, e in counted.values())
    return dg.MaterializeResult(
        metadata={
            "schema_name": name,
            "path": dg.MetadataValue.path(decoded.paths[0]),
            "layers": len(decoded.paths),
            "messages": sum(kinds.values()),
            "by_kind": dg.MetadataValue.json(kinds),
            "undecodable": errors,
        }
    )


def _kinds_counted(decoded: Decoded, spark: SparkSession) -> dict[str | None, tuple[int, int]]:
    """The messages by kind, with how many carry an error: read by pyarrow from two
    narrow columns (no Spark job, ~0.1 s each on the way to a row), or by one Spark job
    where pyarrow cannot open the warehouse."""
    try:
        return kinds_counted(decoded.paths)
    except LocalReadUnavailable as unavailable:
        say_once(str(unavailable))
    frame = decoded.frame(spark)
    assert frame is not None  # it has paths
    by_kind = frame.groupBy("kind").agg(F.count(F.lit(1)).alias("n"), F.count("error").alias("e"))
    with watched(spark):
        return {r["kind"]: (r["n"], r["e"]) for r in by_kind.collect()}


@dg.asset(partitions_def=schemas, group_name=GROUP, deps=[decoded_messages], kinds={"python"})
def migration_plan(context: dg.AssetExecutionContext, postgres: PostgresResource) -> MigrationPlan:
    """The schema log folded into versions (lenses), with the revert rule applied, and
    where this schema stands in the relation order (from the catalog as the last index
    step left it: schema logs are small, no Spark)."""
    with postgres.connect() as conn:
        schema_id = registered_partition(conn, context.partition_key)
        plan = current_plan(conn, schema_id)
        name = name_the_run(context, conn, schema_id, plan.catalog)
    catalog, order = plan.catalog, plan.order
    history = catalog.histories.get(schema_id)
    metadata: dict[str, object] = {
        "schema_name": name,
        "upstream": dg.MetadataValue.json(list(order.upstream.get(schema_id, ()))),
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
        metadata["pending"] = f"{why.reason}: {why.message}"
    context.add_output_metadata(metadata)
    return plan


def current_plan(conn: psycopg.Connection, schema_id: str) -> MigrationPlan:
    """The plan of `schema_id` from the catalog as the last index step left it."""
    catalog = stored_catalog(conn)
    return MigrationPlan(schema_id, catalog, catalog.order())


@dg.asset(
    partitions_def=schemas,
    group_name=GROUP,
    # After the plan, not from it: the build reads the index itself (`last_index`), and
    # a plan stored by an earlier run is not loaded for nothing.
    deps=[decoded_messages, migration_plan],
    kinds={"spark", "postgres"},
    output_required=False,
)
def materialized_table(
    context: dg.AssetExecutionContext,
    pyspark: PySparkResource,
    postgres: PostgresResource,
):
    """The schema's PostgreSQL table, swapped in atomically, built together with the
    other schemas of its batch. A schema pending for an upstream schema (or in a
    relation cycle) is materialized as pending, with its reason and no table; one whose
    build failed fails its run."""
    spark = pyspark.spark_session
    with postgres.connect() as conn:
        schema_id = registered_partition(conn, context.partition_key)
        index = last_index(spark, conn)
        plan = MigrationPlan(schema_id, index.catalog, index.order)
        others = companions(context.instance, context.run.tags, conn, plan, index.layers)
        passed = layers_passed(spark, conn, [*others.batch, *others.grown])
        with watched(spark, holder=conn):
            outcomes = materialize_schemas(
                spark, conn, postgres.resolved_url(), index, sorted({schema_id, *passed})
            )
        outcome = next(o for o in outcomes if o.schema_id == schema_id)
        if outcome.status is BuildStatus.UNCHANGED:
            # The table as the run that built it left it; this run built nothing.
            outcome = replace(registry_outcome(conn, schema_id), path=None, incremental=False)
        name = name_the_run(context, conn, schema_id, index.catalog)  # also a table-only run
        pending = outcome.status is BuildStatus.PENDING
        standing = pending and bool(outcome.table_name) and table_exists(conn, outcome.table_name)
    built = [o for o in outcomes if o.status in BUILT]
    if len(built) > 1 or (built and built[0].schema_id != schema_id):
        ways = ", ".join(
            sorted({f"{'incremental' if o.incremental else 'whole'}/{o.path}" for o in built})
        )
        names = ", ".join(o.schema_id for o in built)
        context.log.info(f"built together ({ways}): {names}")
    if pending:
        # Materialized as what it is: no table built, the reason and what it waits for.
        # Dagster has no "pending" state, and a partition a backfill targets that ends
        # with no materialization ends the whole backfill as failed, which it is not.
        context.log.warning(f"{schema_id} is pending: {outcome.reason}: {outcome.message}")
        yield dg.MaterializeResult(
            metadata={
                "schema_name": name,
                "status": str(BuildStatus.PENDING),
                "pending": f"{outcome.reason}: {outcome.message}",
                "upstream_schemas": dg.MetadataValue.json(list(outcome.upstream)),
                # The table an earlier build left stays as it was; most often there is none.
                "table": outcome.table_name if standing else "none built",
            }
        )
        return
    if outcome.status is BuildStatus.FAILED:
        raise dg.Failure(
            outcome.message, metadata={"reason": str(outcome.reason), "schema_name": name}
        )
    history = index.catalog.histories[schema_id]  # the lens the table was built at
    yield dg.MaterializeResult(
        metadata={
            "schema_name": name,
            "status": str(outcome.status),
            # Only the instances new messages name were reduced again (pipeline.build.increments).
            "incremental": outcome.incremental,
            # Where this run built it: Spark jobs, or the driver path of a small increment
            # (pipeline.build.paths); none for a table left as it was.
            "build_path": str(outcome.path) if outcome.path is not None else "none",
            BUILT_FROM: index.fingerprint,  # an unchanged table was built from it too
            "table": outcome.table_name,
            "dagster/row_count": outcome.rows,
            "version": outcome.version,
            "version_hash": outcome.version_hash,
            "upstream_schemas": dg.MetadataValue.json(list(outcome.upstream)),
            "fallbacks": dg.MetadataValue.json(outcome.fallbacks),
            "fell_back": sum(outcome.fallbacks.values()),
            "dagster/column_schema": dg.TableSchema(
                columns=[dg.TableColumn(name, pg) for name, pg in SYSTEM_COLUMNS]
                + [dg.TableColumn(name, pg_type(spec.type)) for name, spec in history.lens.items()]
            ),
        }
    )


def name_the_run(
    context: dg.AssetExecutionContext, conn: psycopg.Connection, schema_id: str, catalog: Catalog
) -> str:
    """Tag the run with the schema's name and version (`p2panda/schema`, `p2panda/version`):
    the UI shows schema ids, 66 characters cut in the middle; a run tagged with the name
    is found by filtering runs on that tag. Also the runs a UI backfill launched, whose
    tags the product does not choose. Returns the name (the id if it has none)."""
    history = catalog.histories.get(schema_id)
    name = shown_name_of(conn, schema_id) or (history.name if history else None) or schema_id
    tags = {SCHEMA_TAG: name}
    if history is not None and history.latest is not None:
        tags[VERSION_TAG] = str(history.latest.seq)
    context.instance.add_run_tags(context.run.run_id, tags)
    return name


def batch_of(instance: dg.DagsterInstance, tags: Mapping[str, str]) -> list[str]:
    """The schemas a run is built with: its `p2panda/batch` tag, else the partitions of
    the backfill it belongs to (of the table asset), else none but its own."""
    if tags.get(BATCH_TAG):
        return [s for s in tags[BATCH_TAG].split(",") if s]
    backfill_id = tags.get(BACKFILL_TAG)
    if backfill_id:
        backfill = instance.get_backfill(backfill_id)
        data = backfill.asset_backfill_data if backfill else None
        subsets = data.target_subset.partitions_subsets_by_asset_key if data else {}
        if materialized_table.key in subsets:
            keys = subsets[materialized_table.key].get_partition_keys()
            return [schema_id_of(key) for key in keys]
    return []


@dataclass(frozen=True, slots=True)
class Companions:
    """The registered schemas a run's table step builds beside its own (each once, not
    its own): its batch, and the tables a live run brings up to date (`grown`)."""

    batch: list[str]
    grown: list[str]


def companions(
    instance: dg.DagsterInstance,
    tags: Mapping[str, str],
    conn: psycopg.Connection,
    plan: MigrationPlan,
    layers: Sequence[str],
) -> Companions:
    """The schemas built beside `plan.schema_id`, from the index of `layers`: its batch
    (`batch_of`) and, in a live run (`THROUGH_TAG`), every other table that only grew
    since it was built (`increments.only_grown`). A stream of entries over many schemas
    queues a run per schema; without them, an entry would wait for its own schema's
    turn (~20 runs on the bench's store), where now the next run builds it. Each is
    built only once its new layers passed the blocking decoded check (`layers_passed`),
    which this run's check step makes for them (`defs.checks.decoded`)."""
    registered = plan.catalog.registered or set()
    batch = [s for s in dict.fromkeys(batch_of(instance, tags)) if s in registered]
    grown: list[str] = []
    if THROUGH_TAG in tags:
        candidates = [s for s in plan.order.order if s in registered]
        grown = only_grown(conn, plan.catalog, plan.order, candidates, layers)
    taken = {plan.schema_id, *batch}
    return Companions(
        [s for s in batch if s != plan.schema_id], [s for s in grown if s not in taken]
    )


def layers_passed(
    spark: SparkSession, conn: psycopg.Connection, schema_ids: Sequence[str]
) -> list[str]:
    """Those of `schema_ids` whose every decoded layer passed the blocking decoded check
    (`store.checked_layers`): a table is built only from messages that did. Two queries,
    however many schemas (a live run asks it of ~20)."""
    holding = decoded_layers_of(spark, conn, schema_ids)
    checked = checked_layers_of(conn, schema_ids)
    return [s for s in schema_ids if set(holding[s]) <= checked[s]]


family = [raw_entries, decoded_messages, migration_plan, materialized_table]
QUEUE_TAG = {"p2panda/queue": "pipeline"}  # the pipeline's runs, one at a time (dagster.yaml)
# One process per run: the steps share one Spark session instead of starting one each
# (seconds per step), which the latency goal of the sensors needs.
materialize_schema_job = dg.define_asset_job(
    "materialize_schema",
    selection=dg.AssetSelection.assets(*family),
    executor_def=dg.in_process_executor,
)
