"""A whole build's cascades (`pipeline.build.cascades`), settled in the driver or in Spark,
delete what the engine deletes: through a relation into a schema built in the same
run, into one built before (its stored deleted set), and down a schema relating to
itself, several rounds deep."""

from __future__ import annotations

import pytest

from p2panda_assets.engine.corpus import reduce_corpus
from p2panda_assets.pipeline.build import cascades
from p2panda_assets.pipeline.run import run_pipeline
from p2panda_assets.protocol.ids import parse_schema_id
from p2panda_assets.store.ingest import ingest
from p2panda_assets.store.registry import register
from p2panda_assets.testing.builder import CorpusBuilder, create_field, instances
from tests.pipeline.compare import engine_deleted, engine_tables, pg_deleted, pg_tables
from tests.pipeline.test_incremental_matches_engine import profiles_and_mails
from tests.pipeline.test_pipeline_matches_engine import empty_store

pytestmark = [pytest.mark.spark, pytest.mark.postgres]


def threads() -> tuple[CorpusBuilder, list[str], dict[str, set[bytes]]]:
    """Profiles; mails whose `to` cascades from a profile; comments whose `parent`
    cascades from a comment. A profile and a root comment are deleted; and what the
    engine deletes of each schema, by message or by cascade."""
    corpus, profile, mail = profiles_and_mails()
    comment = corpus.author(1).schema(3, "comment")
    comment.migrate(create_field("text", "text", default=""))
    comment.migrate(create_field("parent", "relation", schema=comment.log_ref, cascade=True))
    people, post, talk = (instances(corpus.author(2), n) for n in (1, 2, 3))
    panda, sloth = (people.create(profile.ref(), name=n) for n in ("panda", "sloth"))
    to_panda = [post.create(mail.ref(), to=panda, title=f"{n}") for n in range(3)]
    post.create(mail.ref(), to=sloth, title="kept")
    root = talk.create(comment.ref(), text="root")
    reply = talk.create(comment.ref(), text="reply", parent=root)
    deeper = talk.create(comment.ref(), text="reply to reply", parent=reply)
    deepest = talk.create(comment.ref(), text="and one more", parent=deeper)
    talk.create(comment.ref(), text="unrelated")
    people.delete(panda, profile.ref())
    talk.delete(root, comment.ref())
    deleted = {
        profile.schema_id: {panda},
        mail.schema_id: set(to_panda),
        comment.schema_id: {root, reply, deeper, deepest},
    }
    return corpus, [profile.schema_id, mail.schema_id, comment.schema_id], deleted


@pytest.fixture(params=["driver", "spark"])
def settled_in(request, monkeypatch, tune) -> str:
    """Where the cascades are settled; the other way fails the test if it is taken."""

    def not_here(*args, **kwargs):
        raise AssertionError(f"the cascades were to be settled in the {request.param}")

    if request.param == "driver":
        monkeypatch.setattr(cascades, "_in_spark", not_here)
    else:
        tune(collect_cascade_rows=0)
        monkeypatch.setattr(cascades, "_in_driver", not_here)
    return request.param


def check(conn, corpus: CorpusBuilder, schema_ids: list[str], deleted: dict[str, set[bytes]]):
    expected = reduce_corpus(corpus.pairs, set(schema_ids))
    assert engine_deleted(expected, schema_ids) == pg_deleted(conn, schema_ids)
    assert pg_deleted(conn, schema_ids) == {s: deleted[s] for s in schema_ids}
    assert pg_tables(conn, schema_ids) == engine_tables(expected)


def test_cascades_within_one_build_delete_what_the_engine_deletes(
    spark, session_database, settled_in
):
    corpus, schema_ids, deleted = threads()
    with empty_store(session_database) as conn:
        ingest(conn, corpus.pairs)
        for schema_id in schema_ids:
            register(conn, *parse_schema_id(schema_id), None)
        run_pipeline(spark, conn, session_database)
        check(conn, corpus, schema_ids, deleted)


def test_cascades_from_a_schema_built_before_read_its_stored_deleted_set(
    spark, session_database, settled_in
):
    corpus, schema_ids, deleted = threads()
    profile, mail, _ = schema_ids
    with empty_store(session_database) as conn:
        ingest(conn, corpus.pairs)
        register(conn, *parse_schema_id(profile), None)
        run_pipeline(spark, conn, session_database)
        register(conn, *parse_schema_id(mail), None)
        outcomes = {o.schema_id: o for o in run_pipeline(spark, conn, session_database)}
        # The profiles are not built whole with the mails: their stored set is read.
        assert outcomes[profile].incremental and not outcomes[mail].incremental
        check(conn, corpus, [profile, mail], deleted)
