"""The Spark pipeline writes exactly what the engine computes: for random corpora
(relations, reverts, invalid migrations, forks, flipped bytes, garbage payloads,
duplicates, logs interleaved, some schemas left unregistered), every table in
PostgreSQL, every deleted set and every entry's account equal `reduce_corpus`, value
for value."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from p2panda_assets.engine.corpus import reduce_corpus
from p2panda_assets.errors import P2pandaError
from p2panda_assets.pipeline.columnar.arrow_io import DRIVER_PATH_ENVS
from p2panda_assets.pipeline.columnar.warehouse import exists, remove
from p2panda_assets.pipeline.index.paths import DriverIndexSteps, SparkIndexSteps
from p2panda_assets.pipeline.index.step import last_index, run_index
from p2panda_assets.pipeline.index.verify import current_warehouse
from p2panda_assets.pipeline.materialize import materialize_schemas
from p2panda_assets.pipeline.run import run_pipeline
from p2panda_assets.protocol.entry import decode_entry
from p2panda_assets.protocol.ids import parse_schema_id
from p2panda_assets.protocol.messages import decode_message
from p2panda_assets.statuses import BuildPath
from p2panda_assets.store.catalog import stored_catalog
from p2panda_assets.store.database import connect, ensure_schema
from p2panda_assets.store.feed import verified_reverts
from p2panda_assets.store.ingest import ingest
from p2panda_assets.store.pipeline_state import count_good_entries
from p2panda_assets.store.registry import register
from p2panda_assets.testing.builder import CorpusBuilder, create_field, instances
from p2panda_assets.tuning import tuned
from tests.pipeline.compare import (
    assert_stored_index_equals,
    engine_accounts,
    engine_deleted,
    engine_tables,
    pg_accounts,
    pg_deleted,
    pg_tables,
)
from tests.strategies import corpora, tunings

pytestmark = [pytest.mark.spark, pytest.mark.postgres]


def empty_store(url: str) -> psycopg.Connection:
    conn = connect(url, autocommit=True)
    conn.execute("DROP SCHEMA IF EXISTS p2panda CASCADE")
    conn.execute("DROP SCHEMA IF EXISTS p2panda_data CASCADE")
    ensure_schema(conn)
    return conn


def check_equal(
    spark, url: str, pairs, registered: set[str], index_path: BuildPath | None = None
) -> None:
    """The pipeline's tables, deleted sets, accounts and index equal the engine's; with
    `index_path`, the index step took that path (or had nothing to index)."""
    with empty_store(url) as conn:
        ingest(conn, pairs)
        for schema_id in sorted(registered):
            author, log_id = parse_schema_id(schema_id)
            register(conn, author, log_id, None)
        index = run_index(spark, conn, url)
        materialize_schemas(spark, conn, url, index, sorted(index.catalog.registered or ()))
        if index_path is not None:
            assert index.path in (index_path, None)
        expected = reduce_corpus(pairs, registered)
        assert pg_tables(conn, sorted(registered)) == engine_tables(expected)
        assert pg_deleted(conn, sorted(registered)) == engine_deleted(expected, sorted(registered))
        assert pg_accounts(conn) == engine_accounts(expected)
        assert_stored_index_equals(conn, pairs, expected)


@settings(
    max_examples=16,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(corpus=corpora(), data=st.data())
def test_pipeline_tables_and_accounts_equal_the_engine(spark, session_database, corpus, data):
    schema_ids = sorted(reduce_corpus(corpus.pairs).histories)
    registered = {s for s in schema_ids if data.draw(st.booleans(), label=f"register {s[-3:]}")}
    # Every plan chosen by size, both ways (`tests.strategies.tunings`): each must give
    # the same store.
    chosen = data.draw(tunings(), label="tuning")
    taken = BuildPath.DRIVER if chosen.driver_path_entries > 0 else BuildPath.SPARK
    with tuned(chosen):
        check_equal(spark, session_database, corpus.pairs, registered, taken)


def test_a_badly_signed_migration_is_not_in_the_stored_catalog(spark, session_database):
    """Only verification sees a bad signature (ingest does not check it): the schema log
    folded from the store without Spark must leave that migration out, as the engine
    does, although the entry is stored without a verdict."""
    corpus = CorpusBuilder()
    schema = corpus.author(1).schema(7, "signed")
    schema.migrate(create_field("title", "text"))
    schema.migrate(create_field("body", "text"))
    entry, payload = corpus.pairs[-1]
    corpus.pairs[-1] = (entry[:-1] + bytes([entry[-1] ^ 1]), payload)  # a signature byte
    check_equal(spark, session_database, corpus.pairs, {schema.schema_id})
    with connect(session_database, autocommit=True) as conn:
        assert sorted(stored_catalog(conn).histories[schema.schema_id].versions) == [1, 2]


def test_a_lost_columnar_store_is_verified_again_and_counted_once(spark, session_database):
    """The columnar store's files gone: verification starts over into a new directory,
    and what it derived before (rejections, the count of good entries) is not kept twice."""
    corpus = CorpusBuilder()
    schema = corpus.author(1).schema(7, "again")
    schema.migrate(create_field("title", "text"))
    entry, payload = corpus.pairs[-1]
    corpus.pairs[-1] = (entry[:-1] + bytes([entry[-1] ^ 1]), payload)  # a signature byte
    check_equal(spark, session_database, corpus.pairs, {schema.schema_id})
    with connect(session_database, autocommit=True) as conn:
        lost = current_warehouse(spark, conn)
        remove(spark, lost.base)
        run_pipeline(spark, conn, session_database)
        assert current_warehouse(spark, conn).token != lost.token
        assert count_good_entries(conn) == 1
        assert sorted(stored_catalog(conn).histories[schema.schema_id].versions) == [1]
        expected = reduce_corpus(corpus.pairs, {schema.schema_id})
        assert pg_accounts(conn) == engine_accounts(expected)


def test_an_older_batch_lost_is_verified_again_with_the_rest(spark, session_database):
    """One verified batch's directory gone, not the newest: verification starts over
    (the later steps read every batch), and the tables and accounts are the engine's."""
    corpus = CorpusBuilder()
    schema = corpus.author(1).schema(7, "holes")
    schema.migrate(create_field("title", "text"))
    log = instances(corpus.author(2), 1)
    first = log.create(schema.ref(), title="first")
    early = len(corpus.pairs)
    log.update(schema.ref(), first, title="second")
    instances(corpus.author(3), 1).create(schema.ref(), title="other")
    log.update(schema.ref(), first, title="third")
    *stored, late = corpus.pairs  # arrives after the loss: the next run chains again
    with empty_store(session_database) as conn:
        ingest(conn, stored[:early])
        register(conn, *parse_schema_id(schema.schema_id), None)
        run_pipeline(spark, conn, session_database)
        ingest(conn, stored[early:])
        run_pipeline(spark, conn, session_database)
        holed = current_warehouse(spark, conn)
        assert exists(spark, holed.batch(2))
        remove(spark, holed.batch(1))
        ingest(conn, [late])
        run_pipeline(spark, conn, session_database)
        again = current_warehouse(spark, conn)
        assert again.token != holed.token
        assert count_good_entries(conn) == len(corpus.pairs)
        expected = reduce_corpus(corpus.pairs, {schema.schema_id})
        assert pg_tables(conn, [schema.schema_id]) == engine_tables(expected)
        assert pg_accounts(conn) == engine_accounts(expected)


def as_verified_before_links_were_kept(conn, directory: Path) -> None:
    """Rewrite every verified batch under `directory` as earlier releases wrote them:
    each good entry's bytes (`entry`), no links."""
    stored = dict(conn.execute("SELECT hash, entry FROM p2panda.entries").fetchall())
    for path in directory.glob("batch=*/*.parquet"):
        table = pq.read_table(path)
        good = [v == "ok" for v in table.column("verdict").to_pylist()]
        entries = [
            bytes(stored[h]) if ok else None
            for h, ok in zip(table.column("hash").to_pylist(), good, strict=True)
        ]
        table = table.drop_columns(["backlink", "lipmaa_link", "end_of_log"])
        pq.write_table(table.append_column("entry", pa.array(entries, pa.binary())), path)
        # Hadoop's checksum of the old bytes (Spark's files have one; pyarrow's do not)
        path.with_name(f".{path.name}.crc").unlink(missing_ok=True)


def test_batches_verified_before_the_links_were_kept_chain_the_same(spark, session_database):
    """Verification keeps each entry's links (backlink, lipmaa link, end of log) for the
    chain rules; a store verified by an earlier release kept the entry's bytes instead.
    Chaining both kinds of batch together gives the engine's tables and accounts."""
    corpus = CorpusBuilder()
    schema = corpus.author(1).schema(7, "linked")
    schema.migrate(create_field("title", "text"))
    log = instances(corpus.author(2), 1)
    first = log.create(schema.ref(), title="0")
    for n in range(1, 9):  # seqs 2-9: backlinks, and lipmaa links from seq 5 on
        log.update(schema.ref(), first, title=str(n))
    early = len(corpus.pairs)
    for title in ("a", "b"):  # a fork at seq 1 of a second log
        instances(corpus.author(3), 1).create(schema.ref(), title=title)
    log.update(schema.ref(), first, title="later")
    with empty_store(session_database) as conn:
        ingest(conn, corpus.pairs[:early])
        register(conn, *parse_schema_id(schema.schema_id), None)
        run_pipeline(spark, conn, session_database)
        directory = Path(current_warehouse(spark, conn).entries.removeprefix("file:"))
        as_verified_before_links_were_kept(conn, directory)
        assert "entry" in pq.read_schema(next(directory.glob("batch=1/*.parquet"))).names
        ingest(conn, corpus.pairs[early:])
        run_pipeline(spark, conn, session_database)
        expected = reduce_corpus(corpus.pairs, {schema.schema_id})
        assert pg_tables(conn, [schema.schema_id]) == engine_tables(expected)
        assert pg_accounts(conn) == engine_accounts(expected)
        assert expected.tables[schema.schema_id].rows  # the long log's instance is a row


def as_verified_before_reasons_were_kept(directory: Path) -> None:
    """Rewrite every verified batch under `directory` as earlier releases wrote them:
    no reason code for the payloads that do not decode (`message_error`)."""
    for path in directory.glob("batch=*/*.parquet"):
        pq.write_table(pq.read_table(path).drop_columns(["message_error"]), path)
        # Hadoop's checksum of the old bytes (Spark's files have one; pyarrow's do not)
        path.with_name(f".{path.name}.crc").unlink(missing_ok=True)


@pytest.mark.parametrize("driver_path", ["-1", "1000000"], ids=["in Spark", "in the driver"])
@pytest.mark.parametrize("kept", [True, False], ids=["reasons kept", "an earlier release's"])
def test_payloads_that_do_not_decode_keep_the_engines_reason(
    spark, session_database, monkeypatch, kept, driver_path
):
    """Verification keeps why a payload does not decode, and the chained messages carry
    it as `error` (the decoded check and the asset's metadata read it). Batches verified
    by an earlier release did not keep it: chaining decodes those payloads again, and
    only then. Either way every error is the reason the engine gives."""
    unexplained: list[int] = []
    for steps in (SparkIndexSteps, DriverIndexSteps):

        def counting(self, planned, totals=steps.totals):
            found = totals(self, planned)
            unexplained.append(found.unexplained)
            return found

        monkeypatch.setattr(steps, "totals", counting)
    for name in DRIVER_PATH_ENVS:
        monkeypatch.setenv(name, driver_path)
    corpus = CorpusBuilder()
    schema = corpus.author(1).schema(7, "garbled")
    schema.migrate(create_field("title", "text"))
    log = instances(corpus.author(2), 1)
    log.create(schema.ref(), title="fine")
    for payload in (b"\xff", b"\xa1\x61k\x01", b"\x80"):
        log.raw(payload)
    early = len(corpus.pairs)
    log.raw(b"\xa2\x61a\x01\x61a\x02")  # a key twice
    with empty_store(session_database) as conn:
        ingest(conn, corpus.pairs[:early])
        register(conn, *parse_schema_id(schema.schema_id), None)
        run_pipeline(spark, conn, session_database)
        if not kept:
            as_verified_before_reasons_were_kept(
                Path(current_warehouse(spark, conn).entries.removeprefix("file:"))
            )
        ingest(conn, corpus.pairs[early:])
        run_pipeline(spark, conn, session_database)
        decoded = last_index(spark, conn).decoded(spark)
        assert decoded is not None
        errors = {bytes(r["hash"]): r["error"] for r in decoded.select("hash", "error").collect()}
        expected = reduce_corpus(corpus.pairs, {schema.schema_id})
        assert pg_accounts(conn) == engine_accounts(expected)
    reasons = {}
    for entry, payload in corpus.pairs:
        try:
            decode_message(payload)
            reasons[decode_entry(entry).hash] = None
        except P2pandaError as error:
            reasons[decode_entry(entry).hash] = str(error.reason)
    assert errors == reasons
    assert sorted(set(reasons.values()) - {None}) == [
        "bad-type",
        "cbor-duplicate-key",
        "cbor-malformed",
        "missing-key",
    ]
    assert unexplained == ([0, 0] if kept else [0, 3])


@pytest.mark.parametrize("in_spark", [False, True], ids=["verified in the driver", "in Spark"])
def test_the_sensors_find_a_revert_the_pipeline_verified(spark, session_database, tune, in_spark):
    """Reverts are found in PostgreSQL's message index, which keeps the schema messages
    (and no others) of the entries verification found good."""
    if in_spark:
        tune(verify_in_driver=0)
    corpus = CorpusBuilder()
    schema = corpus.author(1).schema(7, "reverted")
    schema.migrate(create_field("title", "text"))
    schema.migrate(create_field("body", "text"))
    schema.revert(2)
    log = instances(corpus.author(2), 1)
    log.create(schema.ref(2), title="kept")
    check_equal(spark, session_database, corpus.pairs, {schema.schema_id})
    with connect(session_database, autocommit=True) as conn:
        (ingest_seq,) = conn.execute(
            "SELECT ingest_seq FROM p2panda.entries WHERE seq_num = 4 AND author = %s",
            (corpus.author(1).key_pair.public_key,),
        ).fetchone()
        assert verified_reverts(conn) == {schema.schema_id: {4: ingest_seq}}
        kinds = conn.execute("SELECT kind FROM p2panda.message_index ORDER BY kind").fetchall()
        assert kinds == [
            ("schema-meta",),
            ("schema-migration",),
            ("schema-migration",),
            ("schema-revert",),
        ]


def test_updates_of_instances_from_other_logs_are_rejected_with_the_engines_reasons(
    spark, session_database
):
    """The reduction looks up an instance's owner only for an update or delete of an
    instance its log did not create: such a log is reduced a second time, with the
    owners it looked up. Each reason below depends on the owner, so the accounts show
    that the second pass ran, in a whole build and in an increment."""
    corpus = CorpusBuilder()
    owner = corpus.author(1)
    notes = owner.schema(7, "notes")
    notes.migrate(create_field("title", "text"))
    tags = owner.schema(8, "tags")
    tags.migrate(create_field("title", "text"))
    alice, bob = instances(corpus.author(2), 1), instances(corpus.author(3), 1)
    note = alice.create(notes.ref(), title="alice's")
    for number in range(4):  # the later messages stay under half of the schema's
        alice.create(notes.ref(), title=f"another {number}")
    her_update = alice.update(notes.ref(), note, title="her own")
    tag = instances(alice.owner, 2).create(tags.ref(), title="alice's tag")
    first = {"not-author": instances(bob.owner, 2).delete(tag, tags.ref())}
    whole = len(corpus.pairs)
    later = {
        "not-author": bob.update(notes.ref(), note, title="bob's"),
        "wrong-schema": alice.update(notes.ref(), tag, title="from another log"),
        "unknown-instance": bob.delete(her_update, notes.ref()),
    }
    registered = {notes.schema_id, tags.schema_id}
    with empty_store(session_database) as conn:
        for schema_id in sorted(registered):
            register(conn, *parse_schema_id(schema_id), None)
        for pairs, rejected, incremental in (
            (corpus.pairs[:whole], first, False),
            (corpus.pairs, later, True),
        ):
            ingest(conn, pairs)
            outcomes = {o.schema_id: o for o in run_pipeline(spark, conn, session_database)}
            assert outcomes[notes.schema_id].incremental is incremental
            expected = reduce_corpus(pairs, registered)
            assert pg_tables(conn, sorted(registered)) == engine_tables(expected)
            accounts = pg_accounts(conn)
            assert accounts == engine_accounts(expected)
            for reason, entry_hash in rejected.items():
                assert accounts[entry_hash.hex()][1:3] == ("rejected", reason)
