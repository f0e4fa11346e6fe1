"""A run whose Spark JVM runs out of heap, in a process of its own.

`tests/pipeline/test_out_of_memory.py` runs this module as a subprocess: the JVM dies,
and the test session's Spark must not be the one. It builds two schemas' tables, ingests
more entries, and runs the pipeline again with a task that asks the JVM for more heap
than it has (a 1.5 GB string, made in the task, not folded by the planner) where the 5M
store's build ran out: right before the reduction. Spark ends its JVM (exit code 52).
Prints as its last line one JSON object: the error the run raised, the JVM's exit code,
and whether the tables are still those of the first run.

    python -m tests.pipeline.oom_check DATABASE_URL
"""

from __future__ import annotations

import json
import sys
from typing import Any

from p2panda_assets.errors import P2pandaError
from p2panda_assets.pipeline.build import building
from p2panda_assets.pipeline.run import run_pipeline
from p2panda_assets.pipeline.spark.jvm_failures import jvm_exit_code
from p2panda_assets.pipeline.spark.session import build_session, spark_config
from p2panda_assets.protocol.ids import parse_schema_id
from p2panda_assets.store.database import connect, ensure_schema
from p2panda_assets.store.ingest import ingest
from p2panda_assets.store.registry import register
from tests.pipeline.compare import pg_tables
from tests.pipeline.test_partition_sizing import two_schemas_of_mail

HEAP_OUTGROWN = "length(repeat(cast(id AS string), 1500000000))"


def run_out_of_heap_first(reduce: Any) -> Any:
    """`reduce`, after a Spark task that outgrows the heap."""

    def reduce_after_a_task_too_large(items: Any, *args: Any, **kwargs: Any) -> Any:
        items.sparkSession.range(1, numPartitions=1).selectExpr(HEAP_OUTGROWN).collect()
        return reduce(items, *args, **kwargs)

    return reduce_after_a_task_too_large


def stage_tables(conn: Any) -> list[str]:
    rows = conn.execute(
        "SELECT table_schema || '.' || table_name FROM information_schema.tables"
        " WHERE table_name LIKE 'stage%' ORDER BY 1"
    ).fetchall()
    return [row[0] for row in rows]


def run(url: str) -> dict[str, object]:
    corpus, schema_ids = two_schemas_of_mail()
    half = len(corpus.pairs) // 2
    spark = build_session(spark_config("local[2]"))
    with connect(url, autocommit=True) as conn:
        ensure_schema(conn)
        ingest(conn, corpus.pairs[:half])
        for schema_id in schema_ids:
            register(conn, *parse_schema_id(schema_id), None)
        run_pipeline(spark, conn, url)
        before = pg_tables(conn, schema_ids)
        ingest(conn, corpus.pairs[half:])
        # The whole build's reduction (`building.build_whole`) calls it from there.
        building.reduce_instance_logs = run_out_of_heap_first(building.reduce_instance_logs)
        error: dict[str, str] = {}
        try:
            run_pipeline(spark, conn, url)
        except P2pandaError as failed:
            error = {"reason": failed.reason.value, "message": str(failed)}
        except Exception as failed:  # what the test must not see: it shows what came instead
            try:
                text = str(failed)[-2000:]
            except Exception:  # a Py4JJavaError asks the JVM for its text
                text = "(its text could not be read)"
            error = {"reason": f"not a P2pandaError: {type(failed).__name__}", "message": text}
    with connect(url, autocommit=True) as conn:  # a new connection: the run's is gone
        return {
            **error,
            "exit_code": jvm_exit_code(spark, wait=0),
            "tables_kept": pg_tables(conn, schema_ids) == before,
            "rows": sum(len(rows) for rows in before.values()),
            "stage_tables": stage_tables(conn),
        }


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1])))
