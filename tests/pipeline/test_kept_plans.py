"""An appending index step asks whether a changed catalog changes what was decided of any
log by the distinct (reference, decision) pairs the logs table keeps
(`log_plan.changes_a_kept_plan`), not by planning every log of the store again. Held
here to the plain rule on random stores: plan every log with the catalog before, plan
them all again with the catalog after, and compare (fast: no Spark, no PostgreSQL)."""

from __future__ import annotations

from functools import cache

from hypothesis import given, settings
from hypothesis import strategies as st

from p2panda_assets.engine.corpus import Catalog, LogKey, LogSummary, chain_log
from p2panda_assets.pipeline.index.log_plan import changes_a_kept_plan, decided_columns, plan_logs
from p2panda_assets.pipeline.kernels.chain import ref_columns
from p2panda_assets.protocol.entry import Entry, decode_entry
from p2panda_assets.protocol.messages import SchemaHashRef, SchemaVersionRef, VersionedSchema
from p2panda_assets.testing.builder import CorpusBuilder, create_field

SCHEMAS = 3


@cache
def schema_logs() -> tuple[tuple[str, LogKey, list[tuple[Entry, bytes]]], ...]:
    """Three schemas of several versions each; the third relates to the first, so it is
    built only while the first is."""
    corpus = CorpusBuilder()
    made = [corpus.author(10 + i).schema(1, f"s{i}") for i in range(SCHEMAS)]
    for i, schema in enumerate(made):
        schema.migrate(create_field("title", "text"))
        schema.migrate(create_field("body", "text", default=""))
        if i == 2:
            schema.migrate(create_field("about", "relation", schema=made[0].log_ref))
    by_log: dict[LogKey, list[tuple[Entry, bytes]]] = {}
    for raw, payload in corpus.pairs:
        entry = decode_entry(raw)
        by_log.setdefault((entry.author, entry.log_id), []).append((entry, payload))
    return tuple(
        (schema.schema_id, key, entries)
        for schema, (key, entries) in zip(made, by_log.items(), strict=True)
    )


def catalog_of(lengths: list[int], registered: list[bool]) -> Catalog:
    """The catalog of the first `lengths[i]` entries of each schema log (none: unknown)."""
    logs = [
        chain_log(*key, entries[:length])
        for (_, key, entries), length in zip(schema_logs(), lengths, strict=True)
        if length
    ]
    ids = {schema_id for (schema_id, _, _), on in zip(schema_logs(), registered, strict=True) if on}
    return Catalog.build(logs, ids)


@st.composite
def references(draw: st.DrawFn) -> VersionedSchema | None:
    index = draw(st.integers(0, SCHEMAS - 1))
    _, key, entries = schema_logs()[index]
    kind = draw(st.sampled_from(["version", "hash", "unknown hash", "none"]))
    if kind == "version":
        return SchemaVersionRef(*key, draw(st.integers(1, len(entries) + 1)))
    if kind == "hash":
        return SchemaHashRef(draw(st.sampled_from(entries))[0].hash)
    if kind == "unknown hash":
        return SchemaHashRef(bytes([draw(st.integers(0, 3))]) * 34)
    return None


catalogs = st.tuples(
    st.lists(st.integers(0, 4), min_size=SCHEMAS, max_size=SCHEMAS),
    st.lists(st.booleans(), min_size=SCHEMAS, max_size=SCHEMAS),
)


@settings(max_examples=300, deadline=None)
@given(
    logs=st.dictionaries(
        st.tuples(st.sampled_from([b"a" * 32, b"b" * 32, b"c" * 32]), st.integers(1, 6)),
        references(),
        max_size=12,
    ),
    before=catalogs,
    after=catalogs,
)
def test_a_kept_plan_changes_exactly_when_planning_every_log_again_says_so(
    logs: dict[LogKey, VersionedSchema | None],
    before: tuple[list[int], list[bool]],
    after: tuple[list[int], list[bool]],
) -> None:
    summaries = {key: LogSummary(False, ref) for key, ref in logs.items()}
    old, new = catalog_of(*before), catalog_of(*after)
    kept = {
        key: decided_columns(fate) for key, fate in plan_logs(summaries, old, old.order()).items()
    }
    again = {
        key: decided_columns(fate) for key, fate in plan_logs(summaries, new, new.order()).items()
    }
    pairs = {(*ref_columns(summaries[key].first_ref), *decided) for key, decided in kept.items()}
    assert changes_a_kept_plan(pairs, new, new.order()) == (kept != again)


def test_a_duplicate_whose_reference_no_longer_resolves_is_a_change() -> None:
    """Log 2 duplicates log 1 (both name the first schema, one by version, one by a
    version's hash). A catalog in which that hash is unknown makes log 2 wait, and log
    1 stays as it was: only the duplicate's pair shows the change. A catalog in which
    the third schema (related to the first) is not built changes an assigned log."""
    author = b"a" * 32
    first, third = schema_logs()[0], schema_logs()[2]
    (owner, log_id), entries = first[1], first[2]
    summaries = {
        (author, 1): LogSummary(False, SchemaVersionRef(owner, log_id, 1)),
        (author, 2): LogSummary(False, SchemaHashRef(entries[2][0].hash)),
        (author, 3): LogSummary(False, SchemaVersionRef(*third[1], 1)),
    }
    whole = catalog_of([4, 4, 4], [True, True, True])
    plan = plan_logs(summaries, whole, whole.order())
    assert [fate[1].value for fate in plan.values()] == ["assigned", "duplicate", "assigned"]
    pairs = {(*ref_columns(summaries[k].first_ref), *decided_columns(f)) for k, f in plan.items()}
    assert not changes_a_kept_plan(pairs, whole, whole.order())
    shorter = catalog_of([2, 4, 4], [True, True, True])
    again = plan_logs(summaries, shorter, shorter.order())
    assert [decided_columns(again[k]) == decided_columns(plan[k]) for k in plan] == [
        True,
        False,
        True,
    ]
    assert changes_a_kept_plan(pairs, shorter, shorter.order())
    unregistered = catalog_of([4, 4, 4], [False, True, True])
    assert changes_a_kept_plan(pairs, unregistered, unregistered.order())
