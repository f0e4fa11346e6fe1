"""The sensors' decisions, without a database: which schemas are ready to build, which
depend on a rebuilt or reverted schema, and the build order (`engine.readiness`).

The graph: profile <- mail (cascade) <- digest; note -> profile and tag; thread -> itself;
egg <-> chicken (a cycle); orphan -> stray (never registered); late is registered, its log
not indexed. Registry rows are made by hand: a build is only a status and a time here.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from p2panda_assets.engine.corpus import Catalog, chain_log
from p2panda_assets.engine.readiness import (
    Registered,
    Relations,
    Scope,
    build_key,
    cascade_upstream,
    dependents,
    entries_scope,
    in_build_order,
    is_built,
    relation_cycles,
    revert_fan_out,
    unbuilt_upstream,
)
from p2panda_assets.engine.relations import BuildOrder
from p2panda_assets.protocol.entry import decode_entry
from p2panda_assets.statuses import SchemaStatus
from p2panda_assets.testing.builder import CorpusBuilder, create_field

T0 = datetime(2024, 1, 1, tzinfo=UTC)


def at(minutes: int) -> datetime:
    return T0 + timedelta(minutes=minutes)


def graph() -> tuple[dict[str, str], Catalog]:
    """Schema ids by name, and the catalog of every schema log but late's."""
    corpus = CorpusBuilder()
    owner = corpus.author(1)
    names = ("profile", "mail", "digest", "tag", "note", "thread", "egg", "chicken")
    schemas = {name: owner.schema(20 + i, name) for i, name in enumerate(names)}
    stray = owner.schema(99, "stray")
    orphan = owner.schema(98, "orphan")
    late = owner.schema(97, "late")  # registered, its log not indexed yet
    s = schemas
    s["profile"].migrate(create_field("name", "varchar"))
    s["mail"].migrate(create_field("to", "relation", schema=s["profile"].log_ref, cascade=True))
    s["digest"].migrate(create_field("mail", "relation", schema=s["mail"].log_ref))
    s["tag"].migrate(create_field("label", "text"))
    s["note"].migrate(
        create_field("about", "relation", schema=s["profile"].log_ref),
        create_field("tag", "relation", schema=s["tag"].log_ref),
    )
    s["thread"].migrate(
        create_field("reply_to", "relation", schema=s["thread"].log_ref, cascade=True)
    )
    s["egg"].migrate(create_field("chicken", "relation", schema=s["chicken"].log_ref))
    s["chicken"].migrate(create_field("egg", "relation", schema=s["egg"].log_ref))
    orphan.migrate(create_field("stray", "relation", schema=stray.log_ref, cascade=True))
    stray.migrate(create_field("x", "text"))
    ids = {name: schema.schema_id for name, schema in {**s, "orphan": orphan}.items()}
    ids["stray"], ids["late"] = stray.schema_id, late.schema_id
    logs: dict[tuple[bytes, int], list] = {}
    for raw, payload in corpus.pairs:
        entry = decode_entry(raw)
        logs.setdefault((entry.author, entry.log_id), []).append((entry, payload))
    unindexed = (late.owner.key_pair.public_key, late.log_id)
    chained = [chain_log(*key, entries) for key, entries in logs.items() if key != unindexed]
    registered = {sid for name, sid in ids.items() if name != "stray"}
    return ids, Catalog.build(chained, registered)


IDS, CATALOG = graph()
ORDER = CATALOG.order()


def relations(**states: Registered) -> Relations:
    return Relations(CATALOG, ORDER, {IDS[name]: state for name, state in states.items()})


def built(minutes: int) -> Registered:
    return Registered(SchemaStatus.MATERIALIZED, T0, at(minutes))


def registered() -> Registered:
    return Registered(SchemaStatus.REGISTERED, T0, None)


def pending() -> Registered:
    return Registered(SchemaStatus.PENDING, T0, None)


# --- the relation rule ----------------------------------------------------------------------


def test_a_schema_is_ready_once_every_schema_it_relates_to_is_built() -> None:
    rel = relations(profile=registered(), mail=registered())
    assert rel.ready(IDS["profile"])
    assert not rel.ready(IDS["mail"])
    assert rel.why_pending(IDS["mail"]) == f"upstream {IDS['profile']} not materialized yet"
    assert relations(profile=built(1), mail=registered()).ready(IDS["mail"])


def test_a_dropped_upstream_counts_as_built() -> None:
    dropped = Registered(SchemaStatus.DROPPED, T0, at(1))
    assert is_built(dropped) and not is_built(pending()) and not is_built(None)
    assert relations(profile=dropped, mail=registered()).ready(IDS["mail"])


def test_a_failed_upstream_counts_as_built_while_it_keeps_an_earlier_table() -> None:
    """As the pipeline has it (`store.tables.materialized_schemas`): a schema whose last
    build failed keeps its table, and dependents are built on it. (The sensors took it
    as unbuilt: new entries of mail rebuilt nothing, while the pipeline built mail.)"""
    kept = Registered(SchemaStatus.FAILED, T0, at(1))
    never = Registered(SchemaStatus.FAILED, T0, None)
    assert is_built(kept) and not is_built(never)
    rel = relations(profile=kept, mail=built(2))
    assert rel.ready(IDS["mail"])
    assert entries_scope(rel, IDS["mail"], own_log=False) is Scope.FAMILY
    assert not relations(profile=never, mail=registered()).ready(IDS["mail"])


def test_an_upstream_requested_earlier_in_the_same_tick_counts_as_built() -> None:
    rel = relations(profile=registered(), mail=registered())
    assert rel.ready(IDS["mail"], [IDS["profile"]])


def test_a_relation_to_itself_waits_for_nothing() -> None:
    assert unbuilt_upstream(ORDER, IDS["thread"], set()) == []
    assert relations(thread=registered()).ready(IDS["thread"])


def test_a_relation_to_an_unregistered_schema_keeps_a_schema_pending_with_its_reason() -> None:
    rel = relations(orphan=registered())
    assert not rel.ready(IDS["orphan"])
    assert "awaiting-schema" in rel.why_pending(IDS["orphan"])
    assert "is not registered" in rel.why_pending(IDS["orphan"])


def test_a_schema_whose_log_is_not_indexed_is_pending_for_the_index() -> None:
    rel = Relations(CATALOG, ORDER, {IDS["late"]: registered()})
    assert not rel.indexed(IDS["late"])
    assert rel.why_pending(IDS["late"]) == "its schema log is not indexed yet"


def test_a_relation_cycle_is_reported_on_its_registered_schemas_and_never_ready() -> None:
    rel = relations(egg=built(1), chicken=built(1))
    cycle = rel.cycles()
    assert set(cycle) == {IDS["egg"], IDS["chicken"]}
    assert "relation cycle" in cycle[IDS["egg"]]
    assert not rel.ready(IDS["egg"]) and not rel.ready(IDS["chicken"])
    assert relation_cycles(ORDER, {IDS["egg"]}).keys() == {IDS["egg"]}


# --- the build order ------------------------------------------------------------------------


def test_the_build_order_puts_upstream_schemas_first_and_the_unbuildable_last_by_id() -> None:
    names = ["digest", "egg", "mail", "profile", "orphan"]
    ordered = in_build_order(ORDER, [IDS[n] for n in names])
    assert ordered[:3] == [IDS["profile"], IDS["mail"], IDS["digest"]]
    assert ordered[3:] == sorted([IDS["egg"], IDS["orphan"]])
    assert in_build_order(BuildOrder(), ["b", "a"]) == ["a", "b"]


# --- what depends on a rebuilt or reverted schema -------------------------------------------


def test_dependents_are_every_schema_whose_relations_reach_it_transitively() -> None:
    assert dependents(ORDER, IDS["profile"]) == {IDS["mail"], IDS["digest"], IDS["note"]}
    assert dependents(ORDER, IDS["digest"]) == set()
    assert dependents(ORDER, IDS["thread"]) == set()  # not its own dependent
    rel = relations(profile=built(1))
    assert rel.dependents(IDS["profile"]) == in_build_order(
        ORDER, [IDS["mail"], IDS["digest"], IDS["note"]]
    )


def test_cascade_upstream_is_the_targets_of_cascade_fields_but_itself() -> None:
    history = CATALOG.histories
    assert cascade_upstream(history[IDS["mail"]], CATALOG.hash_index) == {IDS["profile"]}
    assert cascade_upstream(history[IDS["digest"]], CATALOG.hash_index) == set()  # no cascade
    assert cascade_upstream(history[IDS["thread"]], CATALOG.hash_index) == set()
    assert cascade_upstream(history[IDS["orphan"]], CATALOG.hash_index) == {IDS["stray"]}
    assert relations().cascade_upstream(IDS["late"]) == set()  # not indexed


# --- build_key: which build a registered schema needs now -----------------------------------


def test_a_registered_schema_is_built_once_its_relations_are_ready() -> None:
    assert build_key(relations(profile=registered(), mail=registered()), IDS["mail"], False) is None
    key = build_key(relations(profile=built(1), mail=registered()), IDS["mail"], False)
    assert key == f"register-{IDS['mail']}-{int(T0.timestamp() * 1_000_000)}"


def test_a_registered_schema_not_indexed_yet_is_built_so_the_index_learns_it() -> None:
    rel = Relations(CATALOG, ORDER, {IDS["late"]: registered()})
    assert build_key(rel, IDS["late"], False) == f"register-{IDS['late']}-" + str(
        int(T0.timestamp() * 1_000_000)
    )


def test_a_pending_schema_is_built_once_it_is_ready() -> None:
    assert build_key(relations(profile=registered(), mail=pending()), IDS["mail"], True) is None
    key = build_key(relations(profile=built(1), mail=pending()), IDS["mail"], True)
    assert key is not None and key.startswith(f"relations-{IDS['mail']}-v2-")


def test_a_materialized_schema_is_rebuilt_after_an_upstream_it_cascades_from_is_rebuilt() -> None:
    assert build_key(relations(profile=built(1), mail=built(2)), IDS["mail"], False) is None
    key = build_key(relations(profile=built(3), mail=built(2)), IDS["mail"], False)
    assert key is not None and key.startswith(f"relations-{IDS['mail']}-")


def test_without_cascade_a_rebuilt_upstream_does_not_rebuild_a_materialized_schema() -> None:
    rel = relations(profile=built(1), mail=built(3), digest=built(2))
    assert build_key(rel, IDS["digest"], False) is None


def test_a_schema_pending_at_the_last_tick_is_rebuilt_after_any_upstream() -> None:
    """Entries that arrived while it was pending are not in its table yet."""
    rel = relations(profile=built(1), mail=built(3), digest=built(2))
    key = build_key(rel, IDS["digest"], True)
    assert key is not None and key.startswith(f"relations-{IDS['digest']}-")


def test_a_build_answers_to_its_upstream_builds_the_same_state_asks_the_same_key() -> None:
    first = build_key(relations(profile=built(3), mail=built(2)), IDS["mail"], False)
    again = build_key(relations(profile=built(3), mail=built(2)), IDS["mail"], False)
    later = build_key(relations(profile=built(4), mail=built(2)), IDS["mail"], False)
    assert first == again and later not in (None, first)


@pytest.mark.parametrize("status", [SchemaStatus.FAILED, "unknown"])
def test_a_schema_neither_registered_pending_nor_materialized_gets_no_build(status: str) -> None:
    rel = relations(profile=built(1), mail=Registered(status, T0, at(2)))
    assert build_key(rel, IDS["mail"], True) is None


# --- entries_scope: what new entries rebuild -----------------------------------------------


def test_new_entries_of_a_ready_or_unindexed_schema_rebuild_its_whole_family() -> None:
    rel = Relations(CATALOG, ORDER, {IDS["profile"]: built(1), IDS["late"]: registered()})
    assert entries_scope(rel, IDS["profile"], False) is Scope.FAMILY
    assert entries_scope(rel, IDS["late"], False) is Scope.FAMILY


def test_new_schema_log_entries_of_a_pending_schema_rebuild_up_to_the_plan() -> None:
    rel = relations(mail=pending())
    assert entries_scope(rel, IDS["mail"], own_log=True) is Scope.UP_TO_PLAN


def test_new_instance_entries_of_a_pending_schema_rebuild_nothing() -> None:
    rel = relations(mail=pending())
    assert entries_scope(rel, IDS["mail"], own_log=False) is Scope.NONE


# --- revert_fan_out: what a revert rebuilds --------------------------------------------------


def test_a_revert_rebuilds_the_schema_and_its_dependents_upstream_first() -> None:
    rel = relations(profile=built(1), mail=built(1), digest=built(1), tag=built(1), note=built(1))
    rebuilt, left = revert_fan_out(rel, IDS["profile"])
    assert rebuilt == [IDS["profile"], *in_build_order(ORDER, dependents(ORDER, IDS["profile"]))]
    assert left == []


def test_a_dependent_with_another_upstream_not_built_is_left_pending_by_a_revert() -> None:
    rel = relations(profile=built(1), mail=built(1), digest=built(1), note=built(1))
    rebuilt, left = revert_fan_out(rel, IDS["profile"])
    assert rebuilt == [IDS["profile"], IDS["mail"], IDS["digest"]]
    assert left == [IDS["note"]]  # tag is not registered
