"""Which registered schemas are ready to build, which must be built again, and in which
order: the decisions of the sensors, pure (no database, no Dagster).

The relation rule (rules R-ORDER and R-CYCLE, docs/semantics.md): a schema that relates
to another is built after it, and not before the upstream schema is registered and
materialized; a relation of a schema to itself waits for nothing; a schema in a relation
cycle is reported and never built.
`engine.relations.build_order` says which schemas can be built at all and in which order
(`BuildOrder`); this module adds what the registry says of each (`Registered`): whether
its upstream schemas are built, and when.

The cascade rule (rule R-CASCADE, docs/semantics.md): a schema's rows go when the instance a
cascade relation field points at is deleted, so a schema is rebuilt after an upstream it
cascades from was rebuilt (`cascade_upstream`). A revert re-projects a schema: every
registered schema whose relations reach it is rebuilt after it (`dependents`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from functools import cached_property

from p2panda_assets.engine.cascade import cascade_fields
from p2panda_assets.engine.corpus import Catalog
from p2panda_assets.engine.relations import BuildOrder, HashIndex
from p2panda_assets.engine.schema_log import SchemaHistory
from p2panda_assets.errors import Reason
from p2panda_assets.statuses import BUILT, SchemaStatus


@dataclass(frozen=True, slots=True)
class Registered:
    """What the registry says of one schema (`p2panda.schemas`)."""

    status: str  # a `SchemaStatus` value
    registered_at: datetime
    materialized_at: datetime | None


def is_built(state: Registered | None) -> bool:
    """Dependents can be built on it: its last run built it (materialized, or dropped: no
    fields left), or failed and it keeps the table an earlier run built. The pipeline
    builds them so (`store.tables.materialized_schemas`); the sensors must agree, or they
    skip the dependents' new entries while the pipeline would build them."""
    if state is None:
        return False
    kept_its_table = state.status == SchemaStatus.FAILED and state.materialized_at is not None
    return state.status in BUILT or kept_its_table


def built_after(upstream: Registered, built: datetime | None) -> bool:
    """The upstream schema was materialized after `built` (or the schema never was)."""
    at = upstream.materialized_at
    return at is not None and (built is None or at > built)


# --- the relation graph ---------------------------------------------------------------------


def other_upstream(order: BuildOrder, schema_id: str) -> tuple[str, ...]:
    """The other schemas `schema_id` relates to (a relation to itself waits for nothing)."""
    return tuple(u for u in order.upstream.get(schema_id, ()) if u != schema_id)


def unbuilt_upstream(order: BuildOrder, schema_id: str, built: Collection[str]) -> list[str]:
    """The other schemas `schema_id` relates to that are not in `built`, sorted: what its
    build still waits for."""
    return sorted(u for u in other_upstream(order, schema_id) if u not in built)


def cascade_upstream(history: SchemaHistory, hash_index: HashIndex) -> set[str]:
    """The other schemas whose deletes remove rows of this one: the targets of the current
    lens's cascade fields (rule R-CASCADE; a version hash not known yet names none)."""
    targets = {target for _, target in cascade_fields(history.lens, hash_index)}
    return {t for t in targets if t is not None and t != history.schema_id}


def dependents(order: BuildOrder, schema_id: str) -> set[str]:
    """The schemas whose relations reach `schema_id`, transitively (not itself)."""
    below: dict[str, set[str]] = {}
    for sid in order.upstream:
        for up in other_upstream(order, sid):
            below.setdefault(up, set()).add(sid)
    found: set[str] = set()
    todo = [schema_id]
    while todo:
        for child in below.get(todo.pop(), ()):
            if child not in found and child != schema_id:
                found.add(child)
                todo.append(child)
    return found


def in_build_order(order: BuildOrder, schema_ids: Iterable[str]) -> list[str]:
    """Rule R-ORDER (docs/semantics.md): `schema_ids` upstream first, in the build order,
    then the schemas outside it by id. The one upstream-first ordering: the sensors
    (`Relations.ordered`), the pipeline (`planning.ordered`) and `panda materialize`
    (`orchestration`) order by it."""
    position = {sid: i for i, sid in enumerate(order.order)}
    return sorted(schema_ids, key=lambda s: (position.get(s, len(position)), s))


def relation_cycles(order: BuildOrder, registered: Collection[str]) -> dict[str, str]:
    """Registered schemas in a relation cycle, with the cycle."""
    return {
        sid: why.message
        for sid, why in order.pending.items()
        if why.reason == Reason.RELATION_CYCLE and sid in registered
    }


# --- the registered schemas and their relations ----------------------------------------------


@dataclass(frozen=True)
class Relations:
    """The relation graph of the registered schemas, with what the registry says of each."""

    catalog: Catalog
    order: BuildOrder
    registry: Mapping[str, Registered]

    def upstream(self, schema_id: str) -> tuple[str, ...]:
        return other_upstream(self.order, schema_id)

    def indexed(self, schema_id: str) -> bool:
        """The index step has folded its schema log."""
        return schema_id in self.catalog.histories

    @cached_property
    def buildable(self) -> frozenset[str]:
        return frozenset(self.order.order)

    @cached_property
    def built(self) -> frozenset[str]:
        return frozenset(s for s, state in self.registry.items() if is_built(state))

    def ready(self, schema_id: str, requested: Iterable[str] = ()) -> bool:
        """Buildable, and every upstream schema built (or requested before it in the same
        tick, `requested`)."""
        if schema_id not in self.buildable:
            return False
        return not unbuilt_upstream(self.order, schema_id, self.built | set(requested))

    def why_pending(self, schema_id: str) -> str:
        """Why `schema_id` is not ready, in words."""
        if not self.indexed(schema_id):
            return "its schema log is not indexed yet"
        if schema_id not in self.buildable:
            why = self.catalog.not_built(schema_id, self.order)
            return f"{why.reason}: {why.message}"
        late = unbuilt_upstream(self.order, schema_id, self.built)
        return f"upstream {', '.join(late)} not materialized yet"

    def cycles(self) -> dict[str, str]:
        return relation_cycles(self.order, self.registry)

    def dependents(self, schema_id: str) -> list[str]:
        """Schemas whose relations reach `schema_id`, transitively; build order."""
        return self.ordered(dependents(self.order, schema_id))

    def cascade_upstream(self, schema_id: str) -> set[str]:
        history = self.catalog.histories.get(schema_id)
        return set() if history is None else cascade_upstream(history, self.catalog.hash_index)

    def ordered(self, schema_ids: Iterable[str]) -> list[str]:
        return in_build_order(self.order, schema_ids)

    def version(self, schema_id: str) -> int:
        """Its current version (0: none yet)."""
        history = self.catalog.histories.get(schema_id)
        latest = None if history is None else history.latest
        return 0 if latest is None else latest.seq


# --- decisions ---------------------------------------------------------------------------------


def _stamp(moment: datetime | None) -> str:
    return "none" if moment is None else str(int(moment.timestamp() * 1_000_000))


def build_key(rel: Relations, schema_id: str, was_pending: bool) -> str | None:
    """The key of the build `schema_id` needs now, or None.

    - registered and never built: once its relations are ready (or while its schema log is
      unknown to the index, which only a run can change);
    - pending, and now ready;
    - materialized, and an upstream was materialized after it: one it cascades from (its
      deletes remove rows here), or any, if it was pending at the last tick (entries that
      arrived while it was pending are not in its table yet).
    The key names what the build answers to (the upstream materializations), so a later
    change asks again and the same state never does.
    """
    state = rel.registry[schema_id]
    if state.status == SchemaStatus.REGISTERED:
        if rel.indexed(schema_id) and not rel.ready(schema_id):
            return None
        return f"register-{schema_id}-{_stamp(state.registered_at)}"
    if not rel.ready(schema_id):
        return None
    if state.status == SchemaStatus.MATERIALIZED:
        watched = rel.upstream(schema_id) if was_pending else rel.cascade_upstream(schema_id)
        if not any(built_after(rel.registry[u], state.materialized_at) for u in watched):
            return None
    elif state.status != SchemaStatus.PENDING:
        return None
    ups = ",".join(
        f"{u}@{_stamp(rel.registry[u].materialized_at)}" for u in rel.upstream(schema_id)
    )
    digest = hashlib.sha1(ups.encode()).hexdigest()[:12]
    return f"relations-{schema_id}-v{rel.version(schema_id)}-{digest}"


class Scope(Enum):
    """What a rebuild for new entries covers."""

    FAMILY = "family"  # every asset: index, decode, plan, table
    UP_TO_PLAN = "up-to-plan"  # everything but the table
    NONE = "none"  # nothing now: the table is built once the schema is ready


def entries_scope(rel: Relations, schema_id: str, own_log: bool) -> Scope:
    """What new entries of `schema_id` rebuild:

    - ready (relations materialized), or not indexed yet: the whole family;
    - its own log changed while it is pending: up to the plan (the index learns the new
      version, which may end the wait; the table is built once it is ready);
    - new instance entries while it is pending: nothing.
    """
    if not rel.indexed(schema_id) or rel.ready(schema_id):
        return Scope.FAMILY
    return Scope.UP_TO_PLAN if own_log else Scope.NONE


def revert_fan_out(rel: Relations, schema_id: str) -> tuple[list[str], list[str]]:
    """(to rebuild, pending) after a revert of `schema_id`: it and every registered schema
    whose relations reach it, upstream first; one that is not ready (a cycle, an
    unregistered or unbuilt upstream that is not rebuilt before it) is pending."""
    rebuilt: list[str] = []
    pending: list[str] = []
    for target in [schema_id, *rel.dependents(schema_id)]:
        (rebuilt if rel.ready(target, rebuilt) else pending).append(target)
    return rebuilt, pending
