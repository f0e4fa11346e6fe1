"""What version v of a schema is (rule S-STANDING): alive, dead, rejected or unknown,
answered once by `SchemaHistory.version_state`, and the same answer wherever it is
asked: the engine's resolver, authoring (`panda publish`) and `coordination.check`."""

from __future__ import annotations

import pytest

from p2panda_assets.authoring.instance_ops import pick_version
from p2panda_assets.authoring.refs import Schema
from p2panda_assets.coordination import _disowned
from p2panda_assets.engine.corpus import Catalog, reduce_corpus
from p2panda_assets.engine.instances import Resolved
from p2panda_assets.engine.schema_log import SchemaHistory, VersionState
from p2panda_assets.errors import P2pandaError, Pending, Reason, Rejection
from p2panda_assets.protocol.messages import SchemaVersionRef
from p2panda_assets.testing.builder import CorpusBuilder, create_field

STATES = {
    1: VersionState.ALIVE,  # meta
    2: VersionState.ALIVE,  # creates a
    3: VersionState.DEAD,  # creates b, cut out by the revert at 4
    4: VersionState.ALIVE,  # revert to 2
    5: VersionState.REJECTED,  # creates a again: field-exists, freezes the schema
    6: VersionState.REJECTED,  # schema-frozen
    7: VersionState.UNKNOWN,  # never arrived
}


def story() -> SchemaHistory:
    corpus = CorpusBuilder()
    schema = corpus.author(1).schema(5, "slothmail")
    schema.migrate(create_field("a", "text"))  # 2
    schema.migrate(create_field("b", "text"))  # 3
    schema.revert(2)  # 4
    schema.migrate(create_field("a", "text"))  # 5
    schema.migrate(create_field("c", "text"))  # 6
    return reduce_corpus(corpus.pairs).histories[schema.schema_id]


def test_a_version_is_alive_dead_rejected_or_unknown() -> None:
    history = story()
    assert {v: history.version_state(v).state for v in STATES} == STATES
    assert list(history.version_state(2).lens or ()) == ["a"]
    assert list(history.version_state(3).lens or ()) == ["a", "b"]  # dead keeps its lens
    rejected = history.version_state(5)
    assert rejected.lens is None and rejected.rejection is not None
    assert rejected.rejection.reason is Reason.FIELD_EXISTS
    frozen = history.version_state(6).rejection
    assert frozen is not None and frozen.reason is Reason.SCHEMA_FROZEN
    assert history.version_state(7).version is None


def test_a_refusal_follows_the_state_and_a_delete_takes_a_dead_version() -> None:
    history = story()
    refusals = {v: history.version_state(v).refusal() for v in STATES}
    assert {v: r.reason for v, r in refusals.items() if r is not None} == {
        3: Reason.REVERTED_VERSION,
        5: Reason.REJECTED_VERSION,
        6: Reason.REJECTED_VERSION,
    }
    assert history.version_state(3).refusal(is_delete=True) is None
    assert history.version_state(5).refusal(is_delete=True) is not None


def engine_answer(history: SchemaHistory, version: int) -> VersionState:
    catalog = Catalog({history.schema_id: history}, {}, None)
    resolved = catalog.resolve(SchemaVersionRef(history.author, history.log_id, version))
    if isinstance(resolved, Pending):
        assert resolved.reason is Reason.AWAITING_VERSION
        return VersionState.UNKNOWN
    if isinstance(resolved, Rejection):
        assert resolved.reason is Reason.REJECTED_VERSION
        return VersionState.REJECTED
    assert isinstance(resolved, Resolved)
    return VersionState.DEAD if version in history.dead else VersionState.ALIVE


def authoring_answer(history: SchemaHistory, version: int) -> VersionState:
    schema = Schema(history.author, history.log_id, "slothmail", history)
    try:
        pick_version(schema, version)
    except P2pandaError as error:
        return {
            Reason.AWAITING_VERSION: VersionState.UNKNOWN,
            Reason.REJECTED_VERSION: VersionState.REJECTED,
            Reason.REVERTED_VERSION: VersionState.DEAD,
        }[error.reason]
    assert pick_version(schema, version, for_delete=True) == version
    return VersionState.ALIVE


def check_answer(history: SchemaHistory, version: int) -> VersionState | None:
    """`coordination.check` says `conflicting` for a rejected or a reverted version;
    it does not tell an alive version from one the store lacks (the registry row does)."""
    why = _disowned(history, version, None)
    if why is None:
        return None
    return VersionState.REJECTED if "was rejected" in why else VersionState.DEAD


@pytest.mark.parametrize("version", sorted(STATES))
def test_the_engine_authoring_and_check_give_the_one_answer(version: int) -> None:
    history = story()
    state = history.version_state(version).state
    assert engine_answer(history, version) is state
    assert authoring_answer(history, version) is state
    expected = state if state in (VersionState.DEAD, VersionState.REJECTED) else None
    assert check_answer(history, version) is expected
