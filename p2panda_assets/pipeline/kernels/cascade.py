"""The cascades as a build settles them, on both paths: which schemas a schema's cascade
fields point at, which schemas must be built whole with a source, and the deleted set of
an increment's instances reduced again (`cascade_increments`, the rule
`engine.cascade.apply_cascades` holds for a whole corpus). Whole builds settle theirs with
the same rule (`pipeline.build.cascades`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from p2panda_assets.engine.cascade import cascade_fields
from p2panda_assets.engine.corpus import Catalog


def cascade_sources(catalog: Catalog, schema_id: str) -> tuple[str, ...]:
    """The other schemas whose deleted sets the schema's cascades read (its own is
    decided with its rows)."""
    return tuple(
        sorted(t for t in cascade_targets(catalog, schema_id) if t not in (None, schema_id))
    )


def cascade_targets(catalog: Catalog, schema_id: str) -> set[str | None]:
    """The schemas the current lens's cascade relation fields point at."""
    return {t for _, t in cascade_fields(catalog.histories[schema_id].lens, catalog.hash_index)}


def cascading_from(catalog: Catalog, schema_ids: Iterable[str], sources: set[str]) -> set[str]:
    """The `schema_ids` whose cascades read the deleted set of one of `sources`: a
    cascade field names a source, or one of `schema_ids` found so far, and so on down
    the relations. An increment that cascades from a schema built whole after it must be
    built whole too; a whole build that cascades from an increment waits for it."""
    found: set[str] = set()
    changed = True
    while changed:
        changed = False
        for schema_id in sorted(set(schema_ids) - found):
            if cascade_targets(catalog, schema_id) & (sources | found):
                found.add(schema_id)
                changed = True
    return found


@dataclass(frozen=True, slots=True)
class Again:
    """An instance reduced again: deleted by a message, where its cascade fields
    point (target schema, instance id), and which fields fell back."""

    deleted: bool
    refs: tuple[tuple[str | None, bytes], ...]
    fell_back: tuple[str, ...]


def cascade_increments(
    catalog: Catalog,
    order: Sequence[str],
    again: Mapping[str, Mapping[bytes, Again]],
    stored: Mapping[str, set[bytes]],
) -> tuple[dict[str, set[bytes]], set[str]]:
    """The deleted among the instances reduced again, per incremental schema (upstream
    first in `order`), as `engine.cascade.apply_cascades` decides them: deleted by a
    message, or a cascade field pointing at a deleted instance (of a schema built
    before, `stored`; or of this increment: its stored set, less what was reduced
    again, plus what is deleted now). Also the schemas where an instance stored as
    deleted is not any more: those must be built whole.
    Rule R-CASCADE-DELETE (docs/semantics.md)."""
    deleted_now: dict[str, set[bytes]] = {}
    revived: set[str] = set()

    def gone(target: str | None) -> set[bytes]:
        """The deleted set of a schema decided before the one at hand."""
        if target is None:
            return set()
        if target in again:
            return (stored.get(target, set()) - set(again[target])) | deleted_now.get(target, set())
        return stored.get(target, set())

    for schema_id in order:
        instances = again[schema_id]
        deleted = deleted_now[schema_id] = {h for h, a in instances.items() if a.deleted}
        targets = cascade_targets(catalog, schema_id)
        # Computed once: only the schema's own set grows while its cascades are decided.
        upstream = {t: gone(t) for t in targets if t != schema_id}
        own = stored.get(schema_id, set()) - set(instances)

        changed = bool(targets)
        while changed:
            changed = False
            for instance_id, instance in instances.items():
                if instance_id not in deleted and any(
                    (ref in own or ref in deleted)
                    if target == schema_id
                    else ref in upstream[target]
                    for target, ref in instance.refs
                ):
                    deleted.add(instance_id)
                    changed = True
        if (stored.get(schema_id, set()) & set(instances)) - deleted:
            revived.add(schema_id)
    return deleted_now, revived
