"""The index step appends when that is exact, and chains every log again when it is not:
whichever it does, the tables and accounts equal `reduce_corpus` of the whole store."""

from __future__ import annotations

from dataclasses import replace
from typing import cast

import pytest

from p2panda_assets.engine.corpus import reduce_corpus
from p2panda_assets.pipeline.build.increments import layer_sums
from p2panda_assets.pipeline.columnar.arrow_io import DRIVER_PATH_ENVS
from p2panda_assets.pipeline.columnar.key_index import opened_layer
from p2panda_assets.pipeline.columnar.warehouse import NO_SCHEMA
from p2panda_assets.pipeline.index.paths import DriverIndexSteps, SparkIndexSteps
from p2panda_assets.pipeline.index.step import APPEND_MIN_ENV, run_index
from p2panda_assets.pipeline.run import run_pipeline
from p2panda_assets.protocol.ids import parse_schema_id
from p2panda_assets.store import pipeline_state as state_sql
from p2panda_assets.store.ingest import ingest
from p2panda_assets.store.registry import register
from p2panda_assets.testing.builder import CorpusBuilder, SchemaAuthor, create_field, instances
from p2panda_assets.tuning import tuned, tuning
from tests.pipeline.compare import engine_accounts, engine_tables, pg_accounts, pg_tables
from tests.pipeline.test_incremental_matches_engine import appended_layers
from tests.pipeline.test_pipeline_matches_engine import empty_store

pytestmark = [pytest.mark.spark, pytest.mark.postgres]


@pytest.fixture(autouse=True)
def append_to_small_stores(monkeypatch):
    """The index step appends from 100k entries; these stores are small."""
    monkeypatch.setenv(APPEND_MIN_ENV, "0")


def notes() -> tuple[CorpusBuilder, SchemaAuthor]:
    corpus = CorpusBuilder()
    schema = corpus.author(1).schema(1, "note")
    schema.migrate(create_field("title", "varchar", default=""))
    return corpus, schema


def run_parts(
    spark, url: str, corpus: CorpusBuilder, parts: list[list[int]], registered, firsts=None
):
    """Ingest the corpus's pairs part by part (indexes into `corpus.pairs`), a run after
    each; the tables and accounts must equal the engine's after every run. Returns the
    number of appended layers after each run (and adds the first run's name after each
    to `firsts`, if given)."""
    layers = []
    with empty_store(url) as conn:
        for schema_id in registered:
            register(conn, *parse_schema_id(schema_id), None)
        seen: list[int] = []
        for part in parts:
            ingest(conn, [corpus.pairs[i] for i in part])
            seen += part
            run_pipeline(spark, conn, url)
            expected = reduce_corpus([corpus.pairs[i] for i in sorted(seen)], set(registered))
            assert pg_tables(conn, sorted(registered)) == engine_tables(expected)
            assert pg_accounts(conn) == engine_accounts(expected)
            assert (
                kept_logs_count(conn)
                == conn.execute("SELECT count(*) FROM p2panda.logs").fetchone()[0]
            )
            layers.append(len(appended_layers(conn)))
            if firsts is not None:
                firsts.append(state_sql.pipeline_state(conn).chained_run)
    return layers


def kept_logs_count(conn) -> int:
    """The count of logs each index step's commit keeps (`state_sql.count_logs` reads it)."""
    row = conn.execute("SELECT logs_count FROM p2panda.pipeline_state WHERE id = 1").fetchone()
    assert row is not None and row[0] is not None
    assert state_sql.count_logs(conn) == row[0]
    return int(row[0])


def test_growing_logs_are_appended_layer_by_layer(spark, session_database):
    corpus, schema = notes()
    log = instances(corpus.author(2), 1)
    for title in "abcdef":
        log.create(schema.ref(), title=title)
    other = instances(corpus.author(3), 1)
    other.create(schema.ref(), title="g")  # a new log in the last append: one more counted
    n = len(corpus.pairs)
    parts = [list(range(n - 4)), [n - 4, n - 3], [n - 2], [n - 1]]
    assert run_parts(spark, session_database, corpus, parts, [schema.schema_id]) == [0, 1, 2, 3]


def test_many_layers_are_chained_into_one_run_again(spark, session_database, tune):
    tune(max_layers=2)
    corpus, schema = notes()
    log = instances(corpus.author(2), 1)
    for title in "abcdefgh":
        log.create(schema.ref(), title=title)
    n = len(corpus.pairs)
    parts = [list(range(n - 3)), [n - 3], [n - 2], [n - 1]]
    assert run_parts(spark, session_database, corpus, parts, [schema.schema_id]) == [0, 1, 0, 1]


def test_at_the_layer_limit_the_smallest_layers_merge_and_the_first_run_stays(
    spark, session_database, tune
):
    """Three layers at most: from the fourth run on, each appending step first merges the
    two smallest layers above the first run (`layer_merge`), and never chains every log
    again; the tables still equal the engine's after every run."""
    tune(max_layers=3)
    corpus, schema = notes()
    log = instances(corpus.author(2), 1)
    for title in "abcdefgh":
        log.create(schema.ref(), title=title)
    n = len(corpus.pairs)
    parts = [list(range(n - 5)), [n - 5], [n - 4], [n - 3], [n - 2], [n - 1]]
    firsts: list[str] = []
    layers = run_parts(spark, session_database, corpus, parts, [schema.schema_id], firsts)
    assert layers == [0, 1, 2, 2, 2, 2]
    assert len(set(firsts)) == 1  # the first run, chained by the first step, stays


def test_a_gap_filled_later_chains_every_log_again(spark, session_database):
    """Entry 4 of a log waited for entry 3: the log was not all accepted, so the run
    that brings entry 3 cannot continue it from its tip."""
    corpus, schema = notes()
    log = instances(corpus.author(2), 1)
    for title in "abcdef":
        log.create(schema.ref(), title=title)
    n = len(corpus.pairs)
    missing = n - 3  # the log's fourth entry
    parts = [[i for i in range(n) if i != missing], [missing]]
    assert run_parts(spark, session_database, corpus, parts, [schema.schema_id]) == [0, 0]


def test_a_payload_that_arrives_after_a_run_is_built_by_the_next(spark, session_database):
    """An entry first stored without its payload (`missing-payload`, at ingest) while the
    run indexes its log; its payload arrives later, and the copy that has it replaces
    the stored one, which leaves the verified bound (`store.ingest`): the next run
    verifies and builds it. The index's fingerprint names the bound, not a count of
    the entries within it."""
    corpus, schema = notes()
    log = instances(corpus.author(2), 1)
    for title in "abc":
        log.create(schema.ref(), title=title)
    *before, (last, payload) = corpus.pairs
    registered = {schema.schema_id}
    with empty_store(session_database) as conn:
        register(conn, *parse_schema_id(schema.schema_id), None)
        ingest(conn, [*before, (last, None)])
        run_pipeline(spark, conn, session_database)
        without = reduce_corpus([*before, (last, None)], registered)
        assert pg_tables(conn, sorted(registered)) == engine_tables(without)
        assert pg_accounts(conn) == engine_accounts(without)
        ingest(conn, [(last, payload)])
        run_pipeline(spark, conn, session_database)
        expected = reduce_corpus(corpus.pairs, registered)
        assert pg_tables(conn, sorted(registered)) == engine_tables(expected)
        assert pg_accounts(conn) == engine_accounts(expected)
        assert len(pg_tables(conn, sorted(registered))[schema.schema_id]) == 3


def test_a_log_waiting_for_its_schema_is_chained_again_when_it_arrives(spark, session_database):
    """A log names a schema whose log arrives after it: what the last index step decided
    of that log changes (pending, then assigned), so every log is chained again."""
    corpus, schema = notes()
    instances(corpus.author(2), 1).create(schema.ref(), title="a")
    tag_start = len(corpus.pairs)
    tag = corpus.author(1).schema(2, "tag")
    tag.migrate(create_field("label", "varchar", default=""))
    tag_log = range(tag_start, len(corpus.pairs))
    instances(corpus.author(2), 2).create(tag.ref(), label="early")
    n = len(corpus.pairs)
    parts = [[i for i in range(n) if i not in tag_log], list(tag_log)]
    registered = [schema.schema_id, tag.schema_id]
    assert run_parts(spark, session_database, corpus, parts, registered) == [0, 0]


def test_each_layer_is_summed_by_the_index_step_that_writes_it(spark, session_database):
    """The index step keeps the sums of every layer it writes (`sums_of_layer`, from the
    chain step), equal to what `layer_sums` adds up from the layer's files in Spark:
    after a first step that chains all and after two appends, with a log that names no
    schema (the `-` partition) and logs of schemas that are not registered or not known."""
    corpus, schema = notes()
    log = instances(corpus.author(2), 1)
    for title in "ab":
        log.create(schema.ref(), title=title)
    tag = corpus.author(1).schema(2, "tag")
    tag.migrate(create_field("label", "varchar", default=""))
    instances(corpus.author(3), 1).create(tag.ref(), label="not registered")
    unknown = SchemaAuthor(corpus.author(5), 9)  # a schema whose log never arrives
    instances(corpus.author(4), 1).create(unknown.ref(1), label="x")
    instances(corpus.author(6), 1).raw(b"\xff")  # names no schema: the `-` partition
    log.create(schema.ref(), title="c")  # c and d arrive one step after the other
    log.create(schema.ref(), title="d")
    n = len(corpus.pairs)
    with empty_store(session_database) as conn:
        register(conn, *parse_schema_id(schema.schema_id), None)
        for part in (range(n - 2), [n - 2], [n - 1]):
            ingest(conn, [corpus.pairs[i] for i in part])
            index = run_index(spark, conn, session_database)
            kept = state_sql.layer_digests(conn, index.layers)
            assert set(kept) == set(index.layers)  # no build has summed them yet
            conn.execute("DELETE FROM p2panda.layer_digests")
            summed = layer_sums(spark, conn, index.warehouse, index.layers)
            assert sorted(r for layer in index.layers for r in kept[layer]) == sorted(summed)
            partitions = {(s, a) for s, a, *_ in summed}
            assert {
                (schema.schema_id, True),
                (tag.schema_id, True),
                (NO_SCHEMA, False),
            } <= partitions
        assert len(index.layers) == 3  # the last two steps appended


@pytest.mark.parametrize("driver_path", [True, False])
def test_a_merged_layer_keeps_the_sums_of_what_it_holds(spark, session_database, tune, driver_path):
    """The sums kept of a merged layer (`digests.merged_sums`) equal what `layer_sums`
    adds up from its files in Spark, whichever path merged it (`IndexSteps.merge`)."""
    tune(max_layers=3, driver_path_entries=1_000 if driver_path else -1)
    corpus, schema = notes()
    log = instances(corpus.author(2), 1)
    for title in "abcde":
        log.create(schema.ref(), title=title)
    instances(corpus.author(6), 1).raw(b"\xff")  # names no schema: the `-` partition
    n = len(corpus.pairs)
    with empty_store(session_database) as conn:
        register(conn, *parse_schema_id(schema.schema_id), None)
        for part in (range(n - 4), [n - 4], [n - 3], [n - 2], [n - 1]):
            ingest(conn, [corpus.pairs[i] for i in part])
            index = run_index(spark, conn, session_database)
        assert len(index.layers) == 3
        kept = state_sql.layer_digests(conn, index.layers)
        conn.execute("DELETE FROM p2panda.layer_digests")
        summed = layer_sums(spark, conn, index.warehouse, index.layers)
        assert sorted(r for layer in index.layers for r in kept[layer]) == sorted(summed)
        assert sum(count for *_, count, _ in summed) == n  # every entry, the schema log's too


@pytest.mark.parametrize("steps", [SparkIndexSteps, DriverIndexSteps])
def test_a_forged_entry_at_a_tips_seq_is_told_apart_by_the_layers(
    spark, session_database, monkeypatch, steps
):
    """The entry store holds a refused entry beside the accepted one at a log's tip (the
    same author, log and seq, a signature that does not verify): which of the two the new
    entries link to is read from the chained layers, and the log is still appended. On
    both paths of the index step."""
    for name in DRIVER_PATH_ENVS:
        monkeypatch.setenv(name, "1000000" if steps is DriverIndexSteps else "-1")
    corpus, schema = notes()
    log = instances(corpus.author(2), 1)
    for title in "abcd":
        log.create(schema.ref(), title=title)
    n = len(corpus.pairs)
    entry, payload = corpus.pairs[n - 3]  # the log's seq 2, its tip after the first part
    corpus.pairs.append((entry[:-1] + bytes([entry[-1] ^ 1]), payload))
    read_from_layers: list[object] = []
    accepted_at = steps.accepted_at

    def spying(self, layers, positions):
        read_from_layers.extend(positions)
        return accepted_at(self, layers, positions)

    monkeypatch.setattr(steps, "accepted_at", spying)
    parts = [list(range(n - 2)), [n, n - 2, n - 1]]
    assert run_parts(spark, session_database, corpus, parts, [schema.schema_id]) == [0, 1]
    assert read_from_layers == [(corpus.author(2).key_pair.public_key, 1, 2)]


def test_an_append_reads_the_logs_of_the_authors_it_touches(spark, session_database, monkeypatch):
    """An instance entry: only its author's logs are read from the logs table (the plan
    of a log depends on the catalog and its author's other logs). A new schema version
    may change what was decided of any log: then the decisions the logs table keeps are
    read by reference (`kept_plans`), never every log. The tables equal the engine's
    either way (`run_parts`)."""
    corpus, schema = notes()
    mary, bob = instances(corpus.author(2), 1), instances(corpus.author(3), 1)
    mary.create(schema.ref(), title="a")
    bob.create(schema.ref(), title="b")
    first = len(corpus.pairs)
    mary.create(schema.ref(), title="c")
    second = len(corpus.pairs)
    schema.migrate(create_field("body", "text", default=""))
    read: list[object] = []
    stored_logs, kept_plans = state_sql.stored_logs, state_sql.kept_plans

    def spying(conn, authors):
        read.append(sorted(authors))
        return stored_logs(conn, authors)

    def kept(conn):
        plans = kept_plans(conn)
        read.append(plans)
        return plans

    monkeypatch.setattr(state_sql, "stored_logs", spying)
    monkeypatch.setattr(state_sql, "kept_plans", kept)
    parts = [list(range(first)), list(range(first, second)), list(range(second, len(corpus.pairs)))]
    assert run_parts(spark, session_database, corpus, parts, [schema.schema_id]) == [0, 1, 2]
    mary_key = corpus.author(2).key_pair.public_key
    schema_owner = corpus.author(1).key_pair.public_key
    assert read[:2] == [[mary_key], [schema_owner]]
    plans = cast(list[tuple[object, ...]], read[2])  # one reference, one fate, for both logs
    assert [plan[3:] for plan in plans] == [(schema.schema_id, "assigned", None, None)]
    assert len(read) == 3


def test_an_index_step_that_chains_every_log_again_says_why(spark, session_database):
    """The step's result names the rule that stopped the append (what the raw entries'
    materialization shows as `index_chained_all_because`); an append names none."""
    corpus, schema = notes()
    log = instances(corpus.author(2), 1)
    for title in "abcde":
        log.create(schema.ref(), title=title)
    n = len(corpus.pairs)
    with empty_store(session_database) as conn:
        register(conn, *parse_schema_id(schema.schema_id), None)
        reasons = []
        for part in ([i for i in range(n - 1) if i != n - 3], [n - 3], [n - 1]):
            ingest(conn, [corpus.pairs[i] for i in part])
            reasons.append(run_index(spark, conn, session_database).chained_all)
    assert reasons == [
        "no chained layer to append to",
        "a log with a gap, a fork or no settled schema gets an entry",
        None,  # the log is whole again: appended
    ]


def test_a_first_run_without_its_key_index_is_chained_again_once(spark, session_database):
    """A first run written as an earlier release wrote it (no key index: written while a
    layer of its size got none): the next step chains every log again, once, and says
    why; the new first run has its index, and the step after it appends."""
    corpus, schema = notes()
    log = instances(corpus.author(2), 1)
    for title in "abcdef":
        log.create(schema.ref(), title=title)
    n = len(corpus.pairs)
    reasons = []
    with empty_store(session_database) as conn:
        register(conn, *parse_schema_id(schema.schema_id), None)
        with tuned(replace(tuning(), key_index_messages=10**9)):
            ingest(conn, corpus.pairs[: n - 2])
            reasons.append(run_index(spark, conn, session_database).chained_all)
        with tuned(replace(tuning(), key_index_messages=0)):
            for pair in corpus.pairs[n - 2 :]:
                ingest(conn, [pair])
                result = run_index(spark, conn, session_database)
                reasons.append(result.chained_all)
                first = result.warehouse.chained(result.layers[0])
                assert opened_layer(first).index is not None
            run_pipeline(spark, conn, session_database)
            expected = reduce_corpus(corpus.pairs, {schema.schema_id})
            assert pg_tables(conn, [schema.schema_id]) == engine_tables(expected)
    assert reasons == [
        "no chained layer to append to",
        "the first run has no key index (written by an earlier release)",
        None,  # appended
    ]
