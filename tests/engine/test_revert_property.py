"""Property (b): a revert to t gives the rows of the same log with the dead versions cut
out, except that their deletes still apply.

Two corpora are built from one random script of instance operations: one on a schema
log that migrates past t and then reverts to t at r, one on the same log cut at t, where
every operation naming a version in (t, r] is replayed at t instead, creates and updates
at dead versions are left out, and deletes at dead versions are kept. Their tables must
hold the same rows (instance ids differ, so rows are matched by creation order)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from p2panda_assets.engine.corpus import reduce_corpus
from p2panda_assets.testing.builder import (
    CorpusBuilder,
    create_field,
    instances,
    remove_field,
    update_field,
)

BASE = [create_field("a", "text"), create_field("b", "integer")]
# A later migration: (change, the field it needs present (+) or absent (-)).
LATER = {
    "remove_a": (remove_field("a"), "+a"),
    "b_to_text": (update_field("b", "text", "n/a"), "+b"),
    "add_c": (create_field("c", "varchar", default="c0"), "-c"),
    "validate_a": (update_field("a", "text", "ok", validation="^[a-z]*$"), "+a"),
}
VALUES = {
    "a": st.sampled_from(["x", "Yes", "two\nlines", "ok"]),
    "b": st.integers(-3, 3),
    "c": st.sampled_from(["p", "q"]),
}

# An operation: (kind, version slot, target creation index, field values).
# Version slots: "t" (the target), "dead" (a migration between t and r), "r" (the revert).
operation = st.tuples(
    st.sampled_from(["create", "create", "update", "delete"]),
    st.sampled_from(["t", "dead", "r"]),
    st.integers(0, 5),
    st.fixed_dictionaries({}, optional=VALUES),
)


def build(later: list[str], ops: list, *, with_revert: bool) -> tuple[CorpusBuilder, str, list]:
    corpus = CorpusBuilder()
    schema = corpus.author(1).schema(7, "s")
    schema.migrate(*BASE)
    t = schema.version  # 2
    fields_at = {t: {"a", "b"}}
    if with_revert:
        fields = {"a", "b"}
        for name in later:
            change, needs = LATER[name]
            if (needs[1:] in fields) != (needs[0] == "+"):
                continue  # would be an invalid migration; not what this property is about
            schema.migrate(change)
            if change.action == "remove":
                fields.discard(change.name)
            else:
                fields.add(change.name)
            fields_at[schema.version] = set(fields)
        schema.revert(t)
        fields_at[schema.version] = fields_at[t]
    log = instances(corpus.author(2), 1)
    created: list[bytes | None] = []  # None: a create the cut log leaves out
    for kind, slot, target, values in ops:
        slots = {"t": t, "dead": t + 1, "r": schema.version}  # t + 1 < r: add_c comes first
        version = slots[slot] if with_revert else t
        values = {k: v for k, v in values.items() if k in fields_at[version]}
        kind = kind if created else "create"
        dropped = not with_revert and slot == "dead" and kind != "delete"
        instance = created[target % len(created)] if created else None
        if kind == "create":
            created.append(None if dropped else log.create(schema.ref(version), **values))
        elif dropped or instance is None:
            continue
        elif kind == "update" and values:
            log.update(schema.ref(version), instance, **values)
        elif kind == "delete":
            log.delete(instance, schema.ref(version))
    return corpus, schema.schema_id, created


def rows_by_creation(corpus: CorpusBuilder, schema_id: str, created: list[bytes]) -> list:
    table = reduce_corpus(corpus.pairs).tables[schema_id]
    by_id = {row.instance_id: row.values for row in table.rows}
    return [by_id.get(instance) if instance else None for instance in created]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.sampled_from(sorted(LATER)), max_size=3, unique=True).map(lambda x: ["add_c", *x]),
    st.lists(operation, max_size=12),
)
def test_a_revert_equals_the_log_cut_at_its_target_except_deletes(later, ops) -> None:
    reverted = build(later, ops, with_revert=True)
    cut = build(later, ops, with_revert=False)
    assert rows_by_creation(*reverted) == rows_by_creation(*cut)
