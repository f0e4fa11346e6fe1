"""Every shuffle's partition count follows the store's size: with a tenth of
P2PANDA_ENTRIES_PER_PARTITION the same run spreads its rows over more tasks, and writes
the same tables, deleted sets and accounts (those `reduce_corpus` computes)."""

from __future__ import annotations

import secrets

import pytest
from pyspark.sql import SparkSession

from p2panda_assets.engine.corpus import reduce_corpus
from p2panda_assets.pipeline.run import run_pipeline
from p2panda_assets.pipeline.spark.session import ENTRIES_PER_PARTITION_ENV, shuffle_partitions_for
from p2panda_assets.protocol.ids import parse_schema_id
from p2panda_assets.store.ingest import ingest
from p2panda_assets.store.registry import register
from p2panda_assets.testing.builder import CorpusBuilder, create_field, instances
from tests.pipeline.compare import (
    engine_accounts,
    engine_deleted,
    engine_tables,
    pg_accounts,
    pg_deleted,
    pg_tables,
)
from tests.pipeline.test_pipeline_matches_engine import empty_store

pytestmark = [pytest.mark.spark, pytest.mark.postgres]


def test_the_partition_count_grows_with_the_store_past_the_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Below the bound a store spreads over the cores (up to two partitions a core, one
    per 10,000 entries); above it, no partition holds more than the bound, on any
    number of cores."""
    monkeypatch.delenv("P2PANDA_SHUFFLE_PARTITIONS", raising=False)
    monkeypatch.delenv(ENTRIES_PER_PARTITION_ENV, raising=False)
    assert shuffle_partitions_for(0, 2) == 1
    assert shuffle_partitions_for(10_000, 2) == 1
    assert shuffle_partitions_for(30_000, 2) == 3
    assert shuffle_partitions_for(1_000_000, 2) == 4
    assert shuffle_partitions_for(5_000_000, 2) == 20  # was 4: 1.25M entries each
    assert shuffle_partitions_for(5_000_000, 100) == 200  # a cluster's cores, not the data's
    assert shuffle_partitions_for(100_000_000, 2) == 400
    monkeypatch.setenv(ENTRIES_PER_PARTITION_ENV, "1000")
    assert shuffle_partitions_for(30_000, 2) == 30
    monkeypatch.setenv("P2PANDA_SHUFFLE_PARTITIONS", "1")  # a mid-size store's count only
    assert shuffle_partitions_for(30_000, 2) == 30


def most_tasks_of_a_stage(spark: SparkSession, group: str) -> int:
    """The most tasks any stage of the jobs run under `group` had."""
    tracker = spark.sparkContext.statusTracker()
    tasks = [
        stage.numTasks
        for job_id in tracker.getJobIdsForGroup(group)
        if (job := tracker.getJobInfo(job_id)) is not None
        for stage_id in job.stageIds
        if (stage := tracker.getStageInfo(stage_id)) is not None
    ]
    assert tasks, f"no job ran under {group}"
    return max(tasks)


def two_schemas_of_mail() -> tuple[CorpusBuilder, list[str]]:
    """Two schemas, one relating to the other with a cascade, 12 logs of creates,
    updates and deletes: about 150 entries."""
    corpus = CorpusBuilder()
    people = corpus.author(1).schema(1, "person")
    people.migrate(create_field("name", "text"))
    mail = corpus.author(1).schema(2, "mail")
    mail.migrate(
        create_field("subject", "text"),
        create_field("to", "relation", schema=people.log_ref, cascade=True),
    )
    for seed in range(2, 8):
        author = corpus.author(seed)
        person_log, mail_log = instances(author, 1), instances(author, 2)
        for n in range(4):
            person = person_log.create(people.ref(), name=f"p{seed}.{n}")
            sent = [
                mail_log.create(mail.ref(), subject=f"m{seed}.{n}.{k}", to=person) for k in range(4)
            ]
            mail_log.update(mail.ref(), sent[0], subject="edited")
            if n == 3:
                person_log.delete(person)  # cascades to its mail
            else:
                mail_log.delete(sent[1])
    return corpus, [people.schema_id, mail.schema_id]


def test_a_tenth_of_the_setting_uses_more_partitions_and_gives_the_same_tables(
    spark: SparkSession, session_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    corpus, schema_ids = two_schemas_of_mail()
    expected = reduce_corpus(corpus.pairs, set(schema_ids))
    seen: dict[int, tuple[int, object]] = {}
    for per_partition in (100, 10):
        monkeypatch.setenv(ENTRIES_PER_PARTITION_ENV, str(per_partition))
        group = f"sizing-{per_partition}-{secrets.token_hex(4)}"
        with empty_store(session_database) as conn:
            ingest(conn, corpus.pairs)
            for schema_id in schema_ids:
                register(conn, *parse_schema_id(schema_id), None)
            spark.sparkContext.setJobGroup(group, "test_partition_sizing")
            try:
                run_pipeline(spark, conn, session_database)
            finally:
                spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
            written = (pg_tables(conn, schema_ids), pg_deleted(conn, schema_ids), pg_accounts(conn))
        assert written == (
            engine_tables(expected),
            engine_deleted(expected, schema_ids),
            engine_accounts(expected),
        )
        seen[per_partition] = (most_tasks_of_a_stage(spark, group), written)
    entries = len(corpus.pairs)
    assert seen[10][0] >= -(-entries // 10) > seen[100][0]  # the grouping shuffles' tasks
    assert seen[10][1] == seen[100][1]
