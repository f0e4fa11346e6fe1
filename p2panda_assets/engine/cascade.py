"""Cascading deletes along relation fields marked `cascade`.

An instance is deleted when a delete message applied to it, or when a cascade relation
field of it points at a deleted instance (for `relation[]`, at least one element does).
Upstream schemas are reduced first, so their deleted sets are final; a schema relating
to itself is iterated to a fixpoint.
"""

from __future__ import annotations

from p2panda_assets.engine.instances import Instance
from p2panda_assets.engine.lens import Lens
from p2panda_assets.engine.relations import HashIndex, relation_target
from p2panda_assets.engine.schema_log import SchemaHistory


def cascade_fields(lens: Lens, hash_index: HashIndex) -> list[tuple[str, str | None]]:
    """Rule R-CASCADE (docs/semantics.md): the fields whose target's delete removes the
    row: the relation fields of `lens` marked `cascade`, each with the schema id it names
    (None: a version hash not known yet). The one place this condition is written."""
    return [
        (spec.name, relation_target(spec.relation, hash_index))
        for spec in lens.values()
        if spec.relation is not None and spec.cascade
    ]


def apply_cascades(
    history: SchemaHistory,
    instances: dict[bytes, Instance],
    deleted_upstream: dict[str, set[bytes]],
    hash_index: HashIndex,
) -> set[bytes]:
    """Rule R-CASCADE-DELETE (docs/semantics.md): mark cascade-deleted instances in
    place, to a fixpoint for a schema relating to itself; return every deleted
    instance id. The pipeline settles the same rule in `pipeline.build.increments` and
    `pipeline.build.cascades` (the doc's `also:` line names them and their parity tests)."""
    deleted = {i.id for i in instances.values() if i.deleted_by is not None}
    cascades = cascade_fields(history.lens, hash_index)
    if not cascades:
        return deleted
    changed = True
    while changed:
        changed = False
        for instance in instances.values():
            if instance.deleted_by is not None:
                continue
            for name, target in cascades:
                if target == history.schema_id:
                    gone = deleted
                elif target is None:  # a version hash not known yet: nothing deleted there
                    gone = set()
                else:
                    gone = deleted_upstream.get(target, set())
                hit = _points_into(instance.values.get(name), gone)
                if hit is not None:
                    instance.deleted_by = hit
                    deleted.add(instance.id)
                    changed = True
                    break
    return deleted


def _points_into(value: object, gone: set[bytes]) -> bytes | None:
    """The first instance id in `value` (hex, or a tuple of hex) that is in `gone`."""
    ids = value if isinstance(value, tuple) else (value,)
    for hex_id in ids:
        if isinstance(hex_id, str) and bytes.fromhex(hex_id) in gone:
            return bytes.fromhex(hex_id)
    return None
