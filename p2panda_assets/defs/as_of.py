"""The job `materialize_as_of_version`: a schema's table as it was at version N, built
beside the current table (`pipeline.build.as_of`). Launch it from the UI's launchpad with

    ops: {build_version_table: {config: {schema_id: "<author hex>-<log id>", version: N}}}

or with `panda materialize --as-of-version N SCHEMA_ID`. It is an op job, not an asset:
the asset `materialized_table` stays the current table, and its lineage with it.
"""

import dagster as dg
from dagster_pyspark import PySparkResource

from p2panda_assets.defs.assets import QUEUE_TAG
from p2panda_assets.defs.resources import PostgresResource
from p2panda_assets.errors import P2pandaError
from p2panda_assets.pipeline.build.as_of import materialize_as_of
from p2panda_assets.statuses import BuildStatus


class AsOfVersion(dg.Config):
    schema_id: str
    version: int


@dg.op
def build_version_table(
    context: dg.OpExecutionContext,
    config: AsOfVersion,
    pyspark: PySparkResource,
    postgres: PostgresResource,
) -> dg.Output[None]:
    """Index the store, then build the version table of `schema_id` at `version`."""
    try:
        with postgres.connect() as conn:
            outcome = materialize_as_of(
                pyspark.spark_session,
                conn,
                postgres.resolved_url(),
                config.schema_id,
                config.version,
            )
    except P2pandaError as error:  # a reason code, for the UI and for `panda materialize`
        raise dg.Failure(error.message, metadata={"reason": str(error.reason)}) from error
    if outcome.status in (BuildStatus.PENDING, BuildStatus.FAILED):
        raise dg.Failure(outcome.message, metadata={"reason": str(outcome.reason)})
    context.log.info(f"{outcome.table_name}: {outcome.rows} rows at version {outcome.version}")
    return dg.Output(
        None,
        metadata={
            "status": str(outcome.status),
            "table": outcome.table_name,
            "rows": outcome.rows,
            "version": outcome.version,
            "version_hash": outcome.version_hash,
            "fallbacks": dg.MetadataValue.json(outcome.fallbacks),
        },
    )


@dg.job(executor_def=dg.in_process_executor, tags=QUEUE_TAG)
def materialize_as_of_version() -> None:
    build_version_table()
