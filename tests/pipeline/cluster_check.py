"""The pipeline on a standalone Spark cluster, in a process of its own.

`tests/pipeline/test_cluster.py` runs this module as a subprocess: one JVM holds one
SparkContext, and the test session's local one must not stand in the way. It ingests a
small multi-schema corpus (relations, a revert, cascades across and within schemas) into
the database it is given, registers every schema, runs `run_pipeline` on a session built
with `spark_config(master)`, compares tables and accounts with `reduce_corpus`, and prints
as its last line one JSON object with the evidence that executors did the work.

    python -m tests.pipeline.cluster_check DATABASE_URL spark://127.0.0.1:PORT
"""

from __future__ import annotations

import json
import sys
import time
from contextlib import AbstractContextManager
from dataclasses import replace

# As in the code server, whose code location imports the asset checks: pandera sets
# SPARK_LOCAL_IP=127.0.0.1 on import when it is unset, which must not decide where
# executors look for the driver (`driver_address`).
import pandera.pyspark  # noqa: F401

from p2panda_assets.engine.corpus import reduce_corpus
from p2panda_assets.pipeline.run import run_pipeline
from p2panda_assets.pipeline.spark import session as spark_settings
from p2panda_assets.pipeline.spark.session import build_session, spark_config
from p2panda_assets.protocol.ids import parse_schema_id
from p2panda_assets.store.database import connect, ensure_schema
from p2panda_assets.store.ingest import ingest
from p2panda_assets.store.registry import register
from p2panda_assets.testing.builder import CorpusBuilder, create_field, instances
from p2panda_assets.tuning import PipelineTuning, tuned, tuning
from tests.pipeline.compare import engine_accounts, engine_tables, pg_accounts, pg_tables


def cluster_corpus() -> CorpusBuilder:
    """Three schemas: `profile` (a field added, then reverted away), `mail` relating to
    profile with cascade, `comment` relating to mail with cascade and to itself, so one
    profile deletion cascades across two schemas and down a reply chain; and an entry
    whose signature only verification finds broken."""
    corpus = CorpusBuilder()
    owner = corpus.author(1)
    profile = owner.schema(20, "profile")
    profile.migrate(create_field("name", "varchar"))  # 2
    mail = owner.schema(21, "mail")
    mail.migrate(
        create_field("subject", "text"),
        create_field("to", "relation", schema=profile.log_ref, cascade=True),
    )  # 2
    comment = owner.schema(22, "comment")
    comment.migrate(
        create_field("text", "text"),
        create_field("on", "relation", schema=mail.log_ref, cascade=True),
    )  # 2
    comment.migrate(create_field("parent", "relation", schema=comment.log_ref, cascade=True))  # 3

    alice, bob = corpus.author(2), corpus.author(3)
    panda = instances(alice, 1).create(profile.ref(2), name="panda")
    sloth = instances(bob, 1).create(profile.ref(2), name="sloth")
    profile.migrate(create_field("bio", "text"))  # 3
    instances(alice, 1).update(profile.ref(3), panda, name="panda", bio="dead version")
    instances(bob, 1).create(profile.ref(3), name="created at a dead version", bio="x")
    profile.revert(2)  # 4: bio is gone, messages at version 3 are ignored
    instances(bob, 1).update(profile.ref(4), sloth, name="sloth, renamed")

    to_panda = instances(alice, 2).create(mail.ref(2), subject="to panda", to=panda)
    to_sloth = instances(bob, 2).create(mail.ref(2), subject="to sloth", to=sloth)
    instances(bob, 2).update(mail.ref(2), to_sloth, subject="to sloth, edited")

    root = instances(alice, 3).create(comment.ref(2), text="on the panda mail", on=to_panda)
    reply = instances(alice, 3).create(comment.ref(3), text="reply", on=to_sloth, parent=root)
    instances(bob, 3).create(comment.ref(3), text="reply to reply", parent=reply)
    instances(bob, 3).create(comment.ref(3), text="stays", on=to_sloth)
    instances(alice, 1).delete(panda, profile.ref(4))  # cascades: mail, comments, replies
    instances(bob, 4).create(comment.ref(3), text="its signature broken")
    entry, payload = corpus.pairs[-1]
    corpus.pairs[-1] = (entry[:-1] + bytes([entry[-1] ^ 1]), payload)  # verification rejects it
    return corpus


def take_the_paths_of_a_large_store() -> AbstractContextManager[PipelineTuning]:
    """A cluster is for large stores: their paths, here on a small corpus. Entries are
    verified and accounts copied by Spark tasks, which a cluster retries, and not in
    the driver."""
    spark_settings.SMALL_STORE_ENTRIES = 0
    return tuned(replace(tuning(), verify_in_driver=0))


def run(url: str, master: str) -> dict[str, object]:
    """Run and compare; the evidence that the cluster did the work, for the test."""
    with take_the_paths_of_a_large_store():
        return run_large(url, master)


def run_large(url: str, master: str) -> dict[str, object]:
    corpus = cluster_corpus()
    expected = reduce_corpus(corpus.pairs)
    registered = sorted(expected.histories)
    started = time.perf_counter()
    spark = build_session(spark_config(master))
    seconds = {"session": time.perf_counter() - started}
    try:
        with connect(url, autocommit=True) as conn:
            ensure_schema(conn)
            ingest(conn, corpus.pairs)
            for schema_id in registered:
                register(conn, *parse_schema_id(schema_id), None)
            started = time.perf_counter()
            run_pipeline(spark, conn, url)
            seconds["pipeline"] = time.perf_counter() - started
            expected = reduce_corpus(corpus.pairs, set(registered))
            tables, accounts = pg_tables(conn, registered), pg_accounts(conn)
        context = spark.sparkContext
        # The driver counts itself among the block managers: executors are the rest.
        executors = context._jsc.sc().getExecutorMemoryStatus().size() - 1  # type: ignore[union-attr]
        evidence: dict[str, object] = {
            "master": context.master,
            "driver_host": context.getConf().get("spark.driver.host"),
            "driver_bind_address": context.getConf().get("spark.driver.bindAddress"),
            "app_id": context.applicationId,
            "executors": executors,
            "schemas": len(registered),
            "tables_equal": tables == engine_tables(expected),
            "accounts_equal": accounts == engine_accounts(expected),
            "rows": {schema_id: len(rows) for schema_id, rows in tables.items()},
            "accounts": len(accounts),
            "seconds": {stage: round(value, 1) for stage, value in seconds.items()},
        }
    finally:
        spark.stop()
    return evidence


def main(argv: list[str]) -> int:
    url, master = argv
    evidence = run(url, master)
    print(json.dumps(evidence, sort_keys=True))
    return 0 if evidence["tables_equal"] and evidence["accounts_equal"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
