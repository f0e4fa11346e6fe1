"""Which schemas can be built, and in which order: relations wait for their upstream.

A schema whose current lens has relation fields depends on the schemas they name. It
is built after them, and not at all while one of them is unknown, unregistered or
itself waiting (rule R-ORDER). A relation of a schema to itself is fine (its
cascades run to a fixpoint); a cycle through two or more schemas is reported on every
schema in it and never looped on.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from p2panda_assets.engine.schema_log import SchemaHistory
from p2panda_assets.errors import Pending, Reason
from p2panda_assets.protocol.messages import SchemaHashRef, SchemaRef

HashIndex = dict[bytes, tuple[str, int]]


@dataclass(slots=True)
class BuildOrder:
    order: list[str] = field(default_factory=list)  # upstream schemas first
    upstream: dict[str, tuple[str, ...]] = field(default_factory=dict)
    pending: dict[str, Pending] = field(default_factory=dict)


def relation_target(ref: SchemaRef, hash_index: HashIndex) -> str | None:
    """The schema id a relation names (None: a version hash not known yet)."""
    if isinstance(ref, SchemaHashRef):
        found = hash_index.get(ref.hash)
        return None if found is None else found[0]
    return ref.schema_id


def upstream_of(history: SchemaHistory, hash_index: HashIndex) -> tuple[set[str], list[str]]:
    """(schema ids the current lens relates to, hex of relation hashes not known yet)."""
    targets: set[str] = set()
    unknown: list[str] = []
    for spec in history.lens.values():
        if spec.relation is None:
            continue
        target = relation_target(spec.relation, hash_index)
        if target is None:
            assert isinstance(spec.relation, SchemaHashRef)
            unknown.append(spec.relation.hash.hex())
        else:
            targets.add(target)
    return targets, unknown


def build_order(
    histories: dict[str, SchemaHistory], registered: set[str] | None, hash_index: HashIndex
) -> BuildOrder:
    """Rule R-ORDER (docs/semantics.md): order the buildable (registered) schemas
    upstream first; say why the rest wait."""
    result = BuildOrder()
    wanted = sorted(histories if registered is None else set(histories) & registered)
    deps: dict[str, set[str]] = {}
    for schema_id in wanted:
        targets, unknown = upstream_of(histories[schema_id], hash_index)
        deps[schema_id] = targets - {schema_id}
        result.upstream[schema_id] = tuple(sorted(targets))
        if unknown:
            result.pending[schema_id] = Pending(
                Reason.AWAITING_SCHEMA, f"relation to unknown schema version {unknown[0]}"
            )
    for cycle in _cycles(deps):
        path = " -> ".join([*cycle, cycle[0]])
        for schema_id in cycle:
            result.pending[schema_id] = Pending(Reason.RELATION_CYCLE, f"relation cycle {path}")
    state: dict[str, bool] = {}  # schema id -> buildable, once decided

    def visit(schema_id: str) -> bool:
        if schema_id in state:
            return state[schema_id]
        if schema_id not in deps:  # unknown or unregistered upstream
            return False
        state[schema_id] = False  # provisional; cycles were reported above
        if schema_id in result.pending:
            return False
        for upstream in sorted(deps[schema_id]):
            if not visit(upstream):
                why = "is not registered" if upstream in histories else "is not known"
                if upstream in result.pending:
                    why = "is pending"
                result.pending[schema_id] = Pending(
                    Reason.AWAITING_SCHEMA, f"upstream schema {upstream} {why}"
                )
                return False
        state[schema_id] = True
        result.order.append(schema_id)
        return True

    for schema_id in wanted:
        visit(schema_id)
    return result


def _cycles(deps: dict[str, set[str]]) -> list[list[str]]:
    """Rule R-CYCLE (docs/semantics.md): strongly connected components of two or more
    schemas (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def connect(node: str) -> None:
        nonlocal counter
        index[node] = low[node] = counter
        counter += 1
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(deps.get(node, ())):
            if succ not in deps:
                continue
            if succ not in index:
                connect(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(deps):
        if node not in index:
            connect(node)
    return found
