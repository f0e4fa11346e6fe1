"""Incremental builds write what a whole build writes: for random corpora ingested in
two random parts (a run after each), every table, every account, the fallback counts
and the row counts equal `reduce_corpus` of the whole corpus; a run that only adds
messages to schemas without cascade fields adds them without a whole build; and runs of
one schema at a time (the sensors', a backfill of one partition), in any order, end
where a whole build does."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import psycopg
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from psycopg import sql

from p2panda_assets.cli.materialize_cmd import result_line
from p2panda_assets.engine.corpus import Corpus, reduce_corpus
from p2panda_assets.pipeline.columnar.arrow_io import DRIVER_PATH_ENVS
from p2panda_assets.pipeline.columnar.key_index import opened_layer
from p2panda_assets.pipeline.columnar.warehouse import Warehouse, warehouse_root
from p2panda_assets.pipeline.index.step import APPEND_MIN_ENV, run_index
from p2panda_assets.pipeline.materialize import materialize_schemas
from p2panda_assets.pipeline.run import run_pipeline
from p2panda_assets.protocol.ids import parse_schema_id
from p2panda_assets.statuses import BuildPath
from p2panda_assets.store.ingest import ingest
from p2panda_assets.store.pipeline_state import pipeline_state
from p2panda_assets.store.registry import register, registered_schemas, table_name_for
from p2panda_assets.store.tables import Outcome, registry_outcome, stale_cascades
from p2panda_assets.testing.builder import (
    Author,
    CorpusBuilder,
    InstanceAuthor,
    SchemaAuthor,
    create_field,
    instances,
    remove_field,
)
from p2panda_assets.tuning import DEFAULTS, tuned, tuning
from tests.pipeline.compare import (
    assert_stored_index_equals,
    engine_accounts,
    engine_deleted,
    engine_tables,
    pg_accounts,
    pg_deleted,
    pg_tables,
)
from tests.pipeline.test_pipeline_matches_engine import empty_store
from tests.strategies import corpora, tunings

pytestmark = [pytest.mark.spark, pytest.mark.postgres]


@pytest.fixture(autouse=True)
def append_to_small_stores(monkeypatch):
    """The index step appends from 100k entries; these stores are small."""
    monkeypatch.setenv(APPEND_MIN_ENV, "0")


def registry_counts(conn, schema_ids: list[str]) -> dict[str, tuple[int, dict[str, int]]]:
    rows = conn.execute(
        "SELECT schema_id, rows, fallbacks FROM p2panda.schemas"
        " WHERE schema_id = ANY(%s) AND status = 'materialized'",
        (schema_ids,),
    )
    return {schema_id: (n, dict(fallbacks)) for schema_id, n, fallbacks in rows}


def engine_counts(corpus: Corpus) -> dict[str, tuple[int, dict[str, int]]]:
    return {s: (len(t.rows), t.fallbacks) for s, t in corpus.tables.items() if not t.dropped}


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(corpus=corpora(), data=st.data())
def test_two_runs_equal_the_engine_on_the_whole_corpus(spark, session_database, corpus, data):
    pairs = corpus.pairs
    schema_ids = sorted(reduce_corpus(pairs).histories)
    newest_later = data.draw(st.booleans(), label="newest entries later")
    registered = {  # every schema, when only the newest come later: its table grows
        s
        for s in schema_ids
        if newest_later or data.draw(st.booleans(), label=f"register {s[-3:]}")
    }
    # The second part: the newest entries (every log grows, as from peers in sync), or
    # any entries (gaps filled, forks completed, logs moved between schemas).
    if newest_later:
        cut = data.draw(st.integers(len(pairs) // 2, len(pairs)), label="cut")
        first = [i < cut for i in range(len(pairs))]
    else:
        first = data.draw(st.lists(st.booleans(), min_size=len(pairs), max_size=len(pairs)))
    # Every plan chosen by size, both ways (`tests.strategies.tunings`), the increment's
    # driver path among them.
    chosen = data.draw(tunings(), label="tuning")
    with empty_store(session_database) as conn, tuned(chosen):
        ingest(conn, [p for p, early in zip(pairs, first, strict=True) if early])
        for schema_id in sorted(registered):
            register(conn, *parse_schema_id(schema_id), None)
        run_pipeline(spark, conn, session_database)
        ingest(conn, [p for p, early in zip(pairs, first, strict=True) if not early])
        outcomes = run_pipeline(spark, conn, session_database)
        event(f"incremental builds in the second run: {sum(o.incremental for o in outcomes)}")
        event(f"paths of the increments: {sorted({o.path for o in outcomes if o.incremental})}")
        event(f"the second index step appended: {bool(appended_layers(conn))}")
        # The path drawn is the path taken: these corpora are far below the driver path's
        # bound when it is on.
        taken = BuildPath.DRIVER if chosen.driver_path_entries > 0 else BuildPath.SPARK
        assert {o.path for o in outcomes if o.incremental} <= {taken}
        expected = reduce_corpus(pairs, registered)
        assert pg_tables(conn, sorted(registered)) == engine_tables(expected)
        assert pg_deleted(conn, sorted(registered)) == engine_deleted(expected, sorted(registered))
        assert pg_accounts(conn) == engine_accounts(expected)
        assert registry_counts(conn, sorted(registered)) == engine_counts(expected)
        assert_stored_index_equals(conn, pairs, expected)


def appended_layers(conn) -> list[str]:
    """The chained layers index steps appended since the last one that chained all."""
    return list(conn.execute("SELECT chained_deltas FROM p2panda.pipeline_state").fetchone()[0])


def five_titles_then_three_changes() -> tuple[
    CorpusBuilder, SchemaAuthor, list[tuple[bytes, bytes]]
]:
    """A schema (title) and one log: five creates (the entries before the increment,
    also returned), then an update of the first, a delete of the second and a sixth
    create: three new messages against five, an increment."""
    corpus = CorpusBuilder()
    schema = corpus.author(1).schema(1)
    schema.migrate(create_field("title", "varchar", default="none"))
    log = instances(corpus.author(2), 1)
    first, second, *_ = [log.create(schema.ref(), title=t) for t in "abcde"]
    early = list(corpus.pairs)
    log.update(schema.ref(), first, title="A")
    log.delete(second)
    log.create(schema.ref(), title="f")
    return corpus, schema, early


def test_new_messages_are_added_without_a_whole_build(spark, session_database):
    corpus, schema, early = five_titles_then_three_changes()
    with empty_store(session_database) as conn:
        ingest(conn, early)
        register(conn, *parse_schema_id(schema.schema_id), None)
        [whole] = run_pipeline(spark, conn, session_database)
        ingest(conn, corpus.pairs[len(early) :])
        [added] = run_pipeline(spark, conn, session_database)
        expected = reduce_corpus(corpus.pairs, {schema.schema_id})
        assert (whole.incremental, added.incremental) == (False, True)
        assert len(appended_layers(conn)) == 1  # the index step continued the log too
        assert (whole.rows, added.rows) == (5, 5)
        assert registry_outcome(conn, schema.schema_id).incremental  # other runs report it
        assert pg_tables(conn, [schema.schema_id]) == engine_tables(expected)
        assert pg_accounts(conn) == engine_accounts(expected)


@pytest.mark.parametrize(
    ("driver_path_up_to", "path"), [(None, BuildPath.DRIVER), ("2", BuildPath.SPARK)]
)
def test_an_increment_takes_its_path_by_size(
    spark, session_database, monkeypatch, driver_path_up_to, path
):
    """Seven entries, then three new messages (against five before: an increment): the
    index steps and the increment take the driver path by default; above the setting,
    Spark. Both give the engine's table and accounts."""
    if driver_path_up_to is None:
        for name in DRIVER_PATH_ENVS:
            monkeypatch.delenv(name, raising=False)
    else:
        for name in DRIVER_PATH_ENVS:
            monkeypatch.setenv(name, driver_path_up_to)
    corpus, schema, early = five_titles_then_three_changes()
    with empty_store(session_database) as conn:
        ingest(conn, early)
        register(conn, *parse_schema_id(schema.schema_id), None)
        first = run_index(spark, conn, session_database)
        [whole] = materialize_schemas(spark, conn, session_database, first, [schema.schema_id])
        assert registry_outcome(conn, schema.schema_id).path == BuildPath.SPARK  # as swapped
        ingest(conn, corpus.pairs[len(early) :])
        second = run_index(spark, conn, session_database)
        [added] = materialize_schemas(spark, conn, session_database, second, [schema.schema_id])
        expected = reduce_corpus(corpus.pairs, {schema.schema_id})
        assert (first.path, second.path) == (path, path)  # 7 entries chained, then 3
        assert (whole.path, added.path, added.incremental) == (BuildPath.SPARK, path, True)
        assert registry_outcome(conn, schema.schema_id).path == path  # other runs see it
        [row] = registered_schemas(conn)
        assert result_line(row).endswith(f"  built: {path}")  # `panda materialize`'s line
        assert pg_tables(conn, [schema.schema_id]) == engine_tables(expected)
        assert pg_accounts(conn) == engine_accounts(expected)
        assert pg_deleted(conn, [schema.schema_id]) == engine_deleted(expected, [schema.schema_id])


def test_layers_written_by_spark_come_in_row_groups_with_their_key_index(spark, session_database):
    """Row groups of two messages and every layer indexed: the index steps write their
    layers in Spark (the driver path off for them), each file in row groups of at most
    two messages, each layer with its key index; the increment then finds the touched
    instances' messages in the driver by the index, and equals the engine."""
    layout = replace(tuning(), layer_group_rows=2, key_index_messages=0, driver_path_entries=-1)
    corpus, schema, early = five_titles_then_three_changes()
    with empty_store(session_database) as conn, tuned(layout):
        ingest(conn, early)
        register(conn, *parse_schema_id(schema.schema_id), None)
        run_pipeline(spark, conn, session_database)
        ingest(conn, corpus.pairs[len(early) :])
        [added] = run_pipeline(spark, conn, session_database)
        state = pipeline_state(conn)
        roots = [
            Warehouse(warehouse_root(), state.warehouse_token).chained(run) for run in state.layers
        ]
        expected = reduce_corpus(corpus.pairs, {schema.schema_id})
        assert (added.incremental, added.path) == (True, BuildPath.DRIVER)
        assert pg_tables(conn, [schema.schema_id]) == engine_tables(expected)
        assert pg_accounts(conn) == engine_accounts(expected)
    groups = [
        pq.ParquetFile(path).metadata.row_group(g).num_rows
        for root in roots
        for path in Path(root).glob("schema=*/*.parquet")
        for g in range(pq.ParquetFile(path).metadata.num_row_groups)
    ]
    assert max(groups) == 2 and len(groups) > len(roots)
    assert all(opened_layer(root).index is not None for root in roots)


def chained_run(conn) -> str:
    return conn.execute("SELECT chained_run FROM p2panda.pipeline_state").fetchone()[0]


def test_new_entries_the_chain_accepts_none_of_add_no_layer(spark, session_database):
    """Two entries at seq 1 of a new log (a fork): verified, then held by the chain
    rules. The index step appends, and an empty layer would have no file to read."""
    corpus = CorpusBuilder()
    schema = corpus.author(1).schema(1)
    schema.migrate(create_field("title", "varchar", default="none"))
    early = list(corpus.pairs)
    for title in ("a", "b"):  # each writer starts the same log of the same author afresh
        instances(corpus.author(2), 1).create(schema.ref(), title=title)
    with empty_store(session_database) as conn:
        ingest(conn, early)
        register(conn, *parse_schema_id(schema.schema_id), None)
        run_pipeline(spark, conn, session_database)
        first_run = chained_run(conn)
        ingest(conn, corpus.pairs[len(early) :])
        run_pipeline(spark, conn, session_database)
        expected = reduce_corpus(corpus.pairs, {schema.schema_id})
        assert (chained_run(conn), appended_layers(conn)) == (first_run, [])  # appended
        assert pg_tables(conn, [schema.schema_id]) == engine_tables(expected)
        assert pg_accounts(conn) == engine_accounts(expected)


def profiles_and_mails() -> tuple[CorpusBuilder, SchemaAuthor, SchemaAuthor]:
    """Profiles, and mails whose `to` cascades from the profile it names."""
    corpus = CorpusBuilder()
    owner = corpus.author(1)
    profile = owner.schema(1, "profile")
    profile.migrate(create_field("name", "varchar", default=""))
    mail = owner.schema(2, "mail")
    mail.migrate(
        create_field("to", "relation", schema=profile.log_ref, cascade=True),
        create_field("title", "varchar", default=""),
    )
    return corpus, profile, mail


def run_in_two_parts(spark, url: str, corpus: CorpusBuilder, early: int, schema_ids: list[str]):
    with empty_store(url) as conn:
        ingest(conn, corpus.pairs[:early])
        for schema_id in schema_ids:
            register(conn, *parse_schema_id(schema_id), None)
        run_pipeline(spark, conn, url)
        ingest(conn, corpus.pairs[early:])
        outcomes = {o.schema_id: o for o in run_pipeline(spark, conn, url)}
        appended = bool(appended_layers(conn))
        expected = reduce_corpus(corpus.pairs, set(schema_ids))
        assert pg_tables(conn, schema_ids) == engine_tables(expected)
        assert pg_accounts(conn) == engine_accounts(expected)
        assert registry_counts(conn, schema_ids) == engine_counts(expected)
    return outcomes, appended


def mails_to_panda_and_sloth():
    """Profiles panda and sloth (author 2's log 1), and five mails to them (author 3's)."""
    corpus, profile, mail = profiles_and_mails()
    people = instances(corpus.author(2), 1)
    panda, sloth = (people.create(profile.ref(), name=n) for n in ("panda", "sloth"))
    post = instances(corpus.author(3), 1)
    for to in (panda, sloth, panda, sloth, panda):
        post.create(mail.ref(), to=to, title="hi")
    return corpus, profile, mail, people, panda, post, sloth


def test_a_delete_cascades_into_rows_no_new_message_names(spark, session_database):
    corpus, profile, mail, people, panda, _, _ = mails_to_panda_and_sloth()
    early = len(corpus.pairs)
    people.delete(panda)
    outcomes, _ = run_in_two_parts(
        spark, session_database, corpus, early, [profile.schema_id, mail.schema_id]
    )
    assert outcomes[profile.schema_id].incremental and outcomes[mail.schema_id].incremental
    assert outcomes[mail.schema_id].rows == 2


def test_a_row_whose_cascade_is_undone_rebuilds_its_schema_whole(spark, session_database):
    corpus, profile, mail = profiles_and_mails()
    people = instances(corpus.author(2), 1)
    panda, sloth = (people.create(profile.ref(), name=n) for n in ("panda", "sloth"))
    post = instances(corpus.author(3), 1)
    first = post.create(mail.ref(), to=panda, title="hi")
    for _ in range(4):
        post.create(mail.ref(), to=sloth, title="hi")
    people.delete(panda)
    early = len(corpus.pairs)
    post.update(mail.ref(), first, to=sloth)  # away from the deleted profile
    outcomes, _ = run_in_two_parts(
        spark, session_database, corpus, early, [profile.schema_id, mail.schema_id]
    )
    assert not outcomes[mail.schema_id].incremental
    assert outcomes[mail.schema_id].rows == 5


def test_a_schema_that_cascades_from_one_built_whole_adds_to_its_table_after_it(
    spark, session_database
):
    """The whole build comes first; the increment's cascades read the deleted set it
    decided."""
    corpus, profile, mail, people, panda, post, sloth = mails_to_panda_and_sloth()
    early = len(corpus.pairs)
    profile.migrate(create_field("bio", "text", default=""))  # its table is built whole
    people.delete(panda)
    post.create(mail.ref(), to=sloth, title="new")
    outcomes, _ = run_in_two_parts(
        spark, session_database, corpus, early, [profile.schema_id, mail.schema_id]
    )
    assert not outcomes[profile.schema_id].incremental
    assert outcomes[mail.schema_id].incremental
    assert outcomes[mail.schema_id].rows == 3


@dataclass(frozen=True)
class OrgChain:
    """Orgs, profiles whose `org` cascades and mails whose `to` cascades (author 1's
    schema logs 1-3), author 2's instance log of each, and two orgs in it."""

    corpus: CorpusBuilder
    schemas: tuple[SchemaAuthor, SchemaAuthor, SchemaAuthor]  # org, profile, mail
    logs: tuple[InstanceAuthor, InstanceAuthor, InstanceAuthor]  # orgs, people, post
    closed: bytes
    open_: bytes


def org_chain() -> OrgChain:
    corpus = CorpusBuilder()
    owner = corpus.author(1)
    org = owner.schema(1, "org")
    org.migrate(create_field("name", "varchar", default=""))
    profile = owner.schema(2, "profile")
    profile.migrate(create_field("org", "relation", schema=org.log_ref, cascade=True))
    mail = owner.schema(3, "mail")
    mail.migrate(create_field("to", "relation", schema=profile.log_ref, cascade=True))
    orgs, people, post = (instances(corpus.author(2), n) for n in (1, 2, 3))
    closed, open_ = (orgs.create(org.ref(), name=n) for n in ("closed", "open"))
    return OrgChain(corpus, (org, profile, mail), (orgs, people, post), closed, open_)


def orgs_profiles_and_mails(to_gone: int, to_kept: int):
    """`org_chain`, a profile in each org, and mails: `to_gone` of them to the closed
    org's profile, `to_kept` to the other."""
    chain = org_chain()
    (_, profile, mail), (orgs, people, post) = chain.schemas, chain.logs
    gone, kept = (people.create(profile.ref(), org=o) for o in (chain.closed, chain.open_))
    for to in [gone] * to_gone + [kept] * to_kept:
        post.create(mail.ref(), to=to)
    return chain.corpus, chain.schemas, orgs, post, chain.closed, kept


def test_an_increment_reaches_rows_a_whole_build_before_it_deleted(spark, session_database):
    """A delete two relations up: no new message names the profile the whole builds
    delete by cascade, nor the mails that point at it."""
    corpus, (org, profile, mail), orgs, _, closed, _ = orgs_profiles_and_mails(2, 1)
    early = len(corpus.pairs)
    org.migrate(create_field("city", "varchar", default=""))  # both built whole
    profile.migrate(create_field("bio", "text", default=""))
    orgs.delete(closed)
    schema_ids = [org.schema_id, profile.schema_id, mail.schema_id]
    outcomes, _ = run_in_two_parts(spark, session_database, corpus, early, schema_ids)
    assert [outcomes[s].incremental for s in schema_ids] == [False, False, True]
    assert outcomes[mail.schema_id].rows == 1


def test_rows_a_whole_build_brings_back_rebuild_their_schema_whole(spark, session_database):
    corpus, (org, profile, mail), orgs, post, closed, kept = orgs_profiles_and_mails(1, 2)
    orgs.delete(closed)  # the profile of the closed org, and its mail, cascade
    early = len(corpus.pairs)
    profile.migrate(remove_field("org"))  # ... and no longer do
    post.create(mail.ref(), to=kept)
    schema_ids = [org.schema_id, profile.schema_id, mail.schema_id]
    outcomes, _ = run_in_two_parts(spark, session_database, corpus, early, schema_ids)
    assert not outcomes[profile.schema_id].incremental
    assert not outcomes[mail.schema_id].incremental
    assert outcomes[mail.schema_id].rows == 4


@contextmanager
def built_then_grown(
    spark, url: str, pairs: list[tuple[bytes, bytes]], early: int, schema_ids: list[str]
) -> Iterator[psycopg.Connection]:
    """A store of the `early` first pairs, every one of `schema_ids` registered and
    built, and then the other pairs ingested, not built yet."""
    with empty_store(url) as conn:
        ingest(conn, pairs[:early])
        for schema_id in schema_ids:
            register(conn, *parse_schema_id(schema_id), None)
        run_pipeline(spark, conn, url)
        ingest(conn, pairs[early:])
        yield conn


def build_alone(spark, conn, url: str, schema_id: str) -> Outcome:
    """One schema's run, as a sensor or a backfill of one partition launches it."""
    index = run_index(spark, conn, url)
    return materialize_schemas(spark, conn, url, index, [schema_id])[0]


def assert_equals_the_engine(conn, pairs, schema_ids: list[str]) -> None:
    expected = reduce_corpus(pairs, set(schema_ids))
    assert pg_tables(conn, schema_ids) == engine_tables(expected)
    assert pg_deleted(conn, schema_ids) == engine_deleted(expected, schema_ids)
    assert pg_accounts(conn) == engine_accounts(expected)


def test_a_table_built_before_its_upstream_catches_up_is_built_again(spark, session_database):
    """The mails are built while the profiles' table is behind (a delete of a profile
    is ingested, not built); then the profiles catch up alone, and then the mails, as
    the cascade sensor asks. No new message reaches the mail to the deleted profile: the
    mails' table must see that the deleted set it cascaded from has grown, and reduce
    again the mails that point at the profile deleted since (an increment, not the
    whole table)."""
    corpus, profile, mail, people, panda, _, _ = mails_to_panda_and_sloth()
    early = len(corpus.pairs)
    people.delete(panda)
    schema_ids = [profile.schema_id, mail.schema_id]
    url = session_database
    with built_then_grown(spark, url, corpus.pairs, early, schema_ids) as conn:
        assert build_alone(spark, conn, url, mail.schema_id).rows == 5  # the profiles: behind
        assert stale_cascades(conn, schema_ids) == set()
        assert build_alone(spark, conn, url, profile.schema_id).rows == 1
        assert stale_cascades(conn, schema_ids) == {mail.schema_id}  # `panda materialize` runs
        again = build_alone(spark, conn, url, mail.schema_id)
        assert (again.status, again.incremental, again.rows) == ("materialized", True, 2)
        assert stale_cascades(conn, schema_ids) == set()
        assert_equals_the_engine(conn, corpus.pairs, schema_ids)


@st.composite
def growing_mail(draw: st.DrawFn) -> tuple[CorpusBuilder, list[str], int]:
    """Profiles and mails that cascade from them, written by a few authors (creates,
    updates, deletes, some of them by the wrong author), and where the newer part
    starts: the shape of a store that grows, which incremental builds take."""
    corpus, profile, mail = profiles_and_mails()
    authors = range(2, 2 + draw(st.integers(1, 3)))
    # Steady: each author's logs grow, as a peer writes them. Otherwise every message
    # starts its log again at seq 1 (a fork of the log before).
    steady = draw(st.booleans(), label="steady writers")
    known: dict[int, Author] = {}

    def writer(seed: int) -> Author:
        return known.setdefault(seed, corpus.author(seed)) if steady else corpus.author(seed)

    profiles: list[tuple[int, bytes]] = []
    mails: list[tuple[int, bytes]] = []
    for _ in range(draw(st.integers(4, 24))):
        author = draw(st.sampled_from(authors))
        people, post = instances(writer(author), 1), instances(writer(author), 2)
        action = draw(st.sampled_from(["profile", "mail", "update", "delete", "garbage"]))
        if action == "profile" or not profiles:
            profiles.append((author, people.create(profile.ref(), name=f"p{len(profiles)}")))
        elif action == "mail":
            to = draw(st.sampled_from(profiles))[1]
            mails.append((author, post.create(mail.ref(), to=to, title="hi")))
        elif action == "update" and mails:
            to = draw(st.sampled_from(profiles))[1]
            post.update(mail.ref(), draw(st.sampled_from(mails))[1], to=to)
        elif action == "delete":
            owner, target = draw(st.sampled_from(profiles + mails))
            log = 1 if (owner, target) in profiles else 2
            instances(writer(draw(st.sampled_from([owner, author]))), log).delete(target)
        else:
            post.raw(b"\xff not cbor")
    if draw(st.booleans(), label="profiles migrate in the newer part"):
        profile.migrate(create_field("bio", "text", default=""))  # profiles built whole
    cut = draw(st.integers(2 * len(corpus.pairs) // 3, len(corpus.pairs) - 1))
    return corpus, [profile.schema_id, mail.schema_id], cut


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(growing=growing_mail(), data=st.data())
def test_a_growing_store_with_cascades_equals_the_engine(spark, session_database, growing, data):
    corpus, schema_ids, cut = growing
    settled = data.draw(
        st.sampled_from([0, DEFAULTS.collect_cascade_rows]), label="cascades in driver up to"
    )
    with tuned(replace(tuning(), collect_cascade_rows=settled)):
        outcomes, appended = run_in_two_parts(spark, session_database, corpus, cut, schema_ids)
    event(f"the second index step appended: {appended}")
    event(f"incremental builds in the second run: {sum(o.incremental for o in outcomes.values())}")


@pytest.mark.parametrize(
    ("alone", "then_all"),
    [(("org", "profile", "mail"), False), (("profile", "org", "mail"), True)],
    ids=["upstream first", "profiles first, then a run of all"],
)
def test_a_delete_two_relations_up_reaches_tables_built_a_schema_at_a_time(
    spark, session_database, alone, then_all
):
    """Org, profile, mail, each built alone after the org's delete. Upstream first: the
    profiles' increment deletes the closed org's profile by cascade; no message names
    it, nor the mail that points at it. Profiles first (they read the orgs' set as it
    was), then the orgs, the mails, and a run of all three: the profiles are built again
    (the orgs' set changed) and delete that profile; the mails, built from the same
    index, must not be taken as unchanged."""
    corpus, (org, profile, mail), orgs, _, closed, _ = orgs_profiles_and_mails(2, 1)
    early = len(corpus.pairs)
    orgs.delete(closed)
    schema_ids = [org.schema_id, profile.schema_id, mail.schema_id]
    by_name = {"org": org.schema_id, "profile": profile.schema_id, "mail": mail.schema_id}
    url = session_database
    with built_then_grown(spark, url, corpus.pairs, early, schema_ids) as conn:
        for name in alone:
            build_alone(spark, conn, url, by_name[name])
        if then_all:
            run_pipeline(spark, conn, url)
        assert_equals_the_engine(conn, corpus.pairs, schema_ids)


def test_a_schema_built_whole_after_one_that_fell_back_from_an_increment_reads_its_set(
    spark, session_database
):
    """The closed org's profile, and the mail to it, are deleted by cascade. Later the
    profile moves to the open org (an increment that would bring a deleted row back:
    built whole after all), another profile is deleted, and the mails migrate (built
    whole, after the profiles they cascade from). The mails' build must read the
    profiles' new deleted set: the mail to the moved profile is back, the one to the
    deleted profile goes."""
    chain = org_chain()
    corpus, (org, profile, mail), (orgs, people, post) = chain.corpus, chain.schemas, chain.logs
    closed, open_ = chain.closed, chain.open_
    moving = people.create(profile.ref(), org=closed)
    doomed = people.create(profile.ref(), org=open_)
    post.create(mail.ref(), to=moving)
    post.create(mail.ref(), to=doomed)
    orgs.delete(closed)
    early = len(corpus.pairs)
    people.update(profile.ref(), moving, org=open_)
    people.delete(doomed)
    mail.migrate(create_field("subject", "text", default=""))
    schema_ids = [org.schema_id, profile.schema_id, mail.schema_id]
    outcomes, _ = run_in_two_parts(spark, session_database, corpus, early, schema_ids)
    assert not outcomes[profile.schema_id].incremental
    assert outcomes[mail.schema_id].rows == 1


@st.composite
def chain_deleted_later(draw: st.DrawFn) -> tuple[CorpusBuilder, list[str], int]:
    """`org_chain`, a profile in each org, mails, and where the newer part starts:
    after it, deletes along the chain and a new mail, some of them."""
    chain = org_chain()
    corpus, (org, profile, mail), (orgs, people, post) = chain.corpus, chain.schemas, chain.logs
    closed, open_ = chain.closed, chain.open_
    gone, kept = (people.create(profile.ref(), org=o) for o in (closed, open_))
    for to in draw(st.lists(st.sampled_from([gone, kept]), max_size=4), label="mails"):
        post.create(mail.ref(), to=to)
    cut = len(corpus.pairs)
    if draw(st.booleans(), label="the closed org deleted later"):
        orgs.delete(closed)
    if draw(st.booleans(), label="the open org's profile deleted later"):
        people.delete(kept)
    if draw(st.booleans(), label="a mail to it later"):
        post.create(mail.ref(), to=kept)
    return corpus, [org.schema_id, profile.schema_id, mail.schema_id], cut


@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(chain=chain_deleted_later(), data=st.data())
def test_runs_of_one_schema_at_a_time_then_all_equal_the_engine(
    spark, session_database, chain, data
):
    """The sensors and backfills of single partitions build a schema at a time, in any
    order (a schema before the one it cascades from, too): after such runs over a store
    that grew, a run of every schema gives the engine's tables, deleted sets and
    accounts."""
    corpus, schema_ids, cut = chain
    alone = data.draw(st.permutations(schema_ids), label="built alone, in this order")
    url = session_database
    with built_then_grown(spark, url, corpus.pairs, cut, schema_ids) as conn:
        for schema_id in alone:
            build_alone(spark, conn, url, schema_id)
        run_pipeline(spark, conn, url)
        assert_equals_the_engine(conn, corpus.pairs, schema_ids)


@settings(
    max_examples=4,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(growing=growing_mail())
def test_deleted_sets_too_large_to_broadcast_flag_the_same_rows(spark, session_database, growing):
    """Above `PipelineTuning.broadcast_keys` deleted rows, `staging.flag_live` shuffles the
    instances to meet them instead of broadcasting them (and so do the increments' keys and
    owners): the tables and accounts are the engine's still. The increments take the Spark
    path, where the flags are joined."""
    corpus, schema_ids, cut = growing
    shuffled = replace(tuning(), broadcast_keys=-1, driver_path_entries=-1, driver_path_messages=-1)
    with tuned(shuffled):
        run_in_two_parts(spark, session_database, corpus, cut, schema_ids)


def test_an_increment_postgresql_refuses_fails_only_its_schema(spark, session_database):
    corpus = CorpusBuilder()
    notes, tags = corpus.author(1).schema(1, "note"), corpus.author(1).schema(2, "tag")
    notes.migrate(create_field("title", "text", default=""))
    tags.migrate(create_field("label", "varchar", default=""))
    note_log, tag_log = instances(corpus.author(2), 1), instances(corpus.author(2), 2)
    for n in range(3):
        note_log.create(notes.ref(), title=f"note {n}")
        tag_log.create(tags.ref(), label=f"tag {n}")
    early = len(corpus.pairs)
    note_log.create(notes.ref(), title="refused")
    tag_log.create(tags.ref(), label="taken")
    schema_ids = [notes.schema_id, tags.schema_id]
    with empty_store(session_database) as conn:
        ingest(conn, corpus.pairs[:early])
        for schema_id in schema_ids:
            register(conn, *parse_schema_id(schema_id), None)
        run_pipeline(spark, conn, session_database)
        table = sql.Identifier(*table_name_for(notes.schema_id).split("."))
        conn.execute(  # a user's constraint the new row breaks
            sql.SQL("ALTER TABLE {} ADD CONSTRAINT no_refusals CHECK (title <> 'refused')").format(
                table
            )
        )
        ingest(conn, corpus.pairs[early:])
        outcomes = {o.schema_id: o for o in run_pipeline(spark, conn, session_database)}
        failed, built = outcomes[notes.schema_id], outcomes[tags.schema_id]
        assert failed.status == "failed"
        assert failed.message.startswith("adding to the table failed: new row for relation")
        assert (built.status, built.incremental, built.rows) == ("materialized", True, 4)
        kept = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(table)).fetchone()[0]
        assert kept == 3  # the old rows, whole
        status = conn.execute(
            "SELECT status FROM p2panda.schemas WHERE schema_id = %s", (notes.schema_id,)
        ).fetchone()[0]
        assert status == "failed"


def test_runs_over_compacted_batches_equal_the_engine(spark, session_database, tune):
    """Verified batches compacted by the index steps that chain everything, and appended
    to by the ones between: after every run, the tables and accounts of the store so far."""
    tune(compact_batches=1, max_layers=2)  # every other index step chains everything
    corpus, profile, mail, people, panda, post, sloth = mails_to_panda_and_sloth()
    cuts = [len(corpus.pairs)]
    for title in ("one", "two", "three"):
        post.create(mail.ref(), to=sloth, title=title)
        cuts.append(len(corpus.pairs))
    people.delete(panda)
    post.update(mail.ref(), post.create(mail.ref(), to=sloth, title="four"), title="4")
    cuts.append(len(corpus.pairs))
    schema_ids = [profile.schema_id, mail.schema_id]
    compacted = []
    with empty_store(session_database) as conn:
        ingest(conn, corpus.pairs[: cuts[0]])
        for schema_id in schema_ids:
            register(conn, *parse_schema_id(schema_id), None)
        for start, end in zip([0, *cuts], cuts, strict=False):
            if start:
                ingest(conn, corpus.pairs[start:end])
            run_pipeline(spark, conn, session_database)
            compacted.append(pipeline_state(conn).compacted_through)
            expected = reduce_corpus(corpus.pairs[:end], set(schema_ids))
            assert pg_tables(conn, schema_ids) == engine_tables(expected)
            assert pg_accounts(conn) == engine_accounts(expected)
    # Runs 1-5 verify batches 1-5; the third and the fifth chain everything (the first
    # too, but with one batch only).
    assert compacted == [0, 0, 3, 3, 5]
