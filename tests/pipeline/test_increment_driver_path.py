"""An increment's driver path held to the shared rules, fast (issue 55): over a small
store written with pyarrow (an index step's layer over two batches), `DriverSteps` finds
the instances the second batch names and reduces their messages again, and both are
compared with the rule stated plainly: a message's key is the instance it names, or its
own hash for a create; the messages reduced again are those keyed by a new key, and the
new ones with no key; each log of them goes through `reduce_rows`. The staging half, and
the comparison with Spark's path, are in `tests/pipeline/test_increment_steps_contract.py`
(marked spark)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import cast

import pyarrow as pa
import pytest

from p2panda_assets.engine.corpus import Catalog, LogSummary
from p2panda_assets.pipeline.build.driver_path import READ, touched_locally
from p2panda_assets.pipeline.build.paths import COLLECT, DriverSteps
from p2panda_assets.pipeline.build.reduction import COLLECTED
from p2panda_assets.pipeline.columnar.arrow_io import layers_dataset
from p2panda_assets.pipeline.columnar.key_index import index_layer
from p2panda_assets.pipeline.columnar.warehouse import Warehouse
from p2panda_assets.pipeline.index.paths import DriverIndexSteps
from p2panda_assets.pipeline.index.sequence import IndexResult
from p2panda_assets.pipeline.kernels.batches import Row, python_rows
from p2panda_assets.pipeline.kernels.reduce import reduce_rows
from p2panda_assets.tuning import tuned, tuning
from tests.pipeline.arrow_store import catalog_of, rows_in_order, write_batches
from tests.pipeline.test_increment_steps_contract import a_store_and_its_increment


@dataclass
class Store:
    index: IndexResult
    catalog: Catalog
    schema_id: str
    messages: list[Row]  # every message of the layer


def key_of(message: Row) -> bytes | None:
    """The instance a message creates or names: the rule, stated plainly."""
    if message["instance"] is not None:
        return cast(bytes, message["instance"])
    return cast(bytes, message["hash"]) if message["kind"] == "create" else None


@pytest.fixture(scope="module", params=["scanned", "indexed"])
def store(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Store:
    """The store; `indexed`: its layer in row groups of two messages, with a key index
    (`key_index`), which the increment's reads then go by."""
    indexed = request.param == "indexed"
    layout = replace(tuning(), layer_group_rows=2, key_index_messages=0) if indexed else tuning()
    with tuned(layout):
        return _store(tmp_path_factory, indexed)


def _store(tmp_path_factory: pytest.TempPathFactory, indexed: bool) -> Store:
    corpus, cut, schema_id = a_store_and_its_increment()
    warehouse = Warehouse(str(tmp_path_factory.mktemp("warehouse")), "increment")
    state, _ = write_batches(warehouse, [corpus.pairs[:cut], corpus.pairs[cut:]])
    steps = DriverIndexSteps(warehouse)
    verified = steps.verified(state)
    chained = steps.chain(verified, steps.rows(verified), {})
    found = steps.schema_logs(chained, set())
    schema_logs = {key: LogSummary(True, None) for key, is_schema in found.items() if is_schema}
    catalog = catalog_of(corpus.pairs, schema_logs, {schema_id})
    order = catalog.order()
    planned = steps.plan(chained, [], catalog, order)
    totals = steps.totals(planned)
    run = steps.write(steps.accepted(verified, chained, totals.held), planned, totals, True)
    assert index_layer(warehouse.chained(run)) == indexed
    index = IndexResult(0, totals.logs, catalog, order, warehouse, (run,), "", batch=2)
    dataset = layers_dataset([warehouse.chained(run)])
    assert dataset is not None
    messages = [row for batch in dataset.to_table().to_batches() for row in python_rows(batch)]
    return Store(index, catalog, schema_id, messages)


def test_the_new_keys_are_those_the_new_messages_name(store: Store) -> None:
    steps = DriverSteps(store.index, store.catalog)
    keys = steps.new_keys(store.index.layers, 1)
    expected = {key_of(m) for m in store.messages if cast(int, m["batch"]) > 1} - {None}
    assert keys == expected
    assert len(keys) == 3  # an update, a delete, a create


def touched(store: Store, keys: set[bytes]) -> list[Row]:
    """The messages an increment of the schema after batch 1 reduces again, by the rule."""
    return [
        {**{c: m[c] for c in READ}, "built_batch": 1}
        for m in store.messages
        if m["schema"] == store.schema_id
        and m["assignment"] == "assigned"
        and (key_of(m) in keys or (cast(int, m["batch"]) > 1 and key_of(m) is None))
    ]


def test_the_touched_messages_are_those_keyed_anew(store: Store) -> None:
    keys = {key_of(m) for m in store.messages if cast(int, m["batch"]) > 1} - {None}
    layers = [store.index.warehouse.chained(run) for run in store.index.layers]
    table = touched_locally(layers, {store.schema_id: 1}, cast(set[bytes], keys))
    got = [row for batch in table.to_batches() for row in python_rows(batch)]
    assert rows_in_order(got) == rows_in_order(touched(store, cast(set[bytes], keys)))
    assert [(r["author"], r["log_id"], r["seq"]) for r in got] == sorted(
        (r["author"], r["log_id"], r["seq"]) for r in got
    )  # in log order, as the reduction reads them


def test_the_reduced_rows_are_each_logs_through_the_kernel(store: Store) -> None:
    steps = DriverSteps(store.index, store.catalog)
    keys = steps.new_keys(store.index.layers, 1)
    reduced = steps.reduce({store.schema_id: 1}, keys)
    logs: dict[tuple[object, object], list[Row]] = {}
    for row in sorted(touched(store, keys), key=lambda r: cast(int, r["seq"])):
        row = {**row, "owner_author": None, "owner_log": None}
        logs.setdefault((row["author"], row["log_id"]), []).append(row)
    expected = [
        {c: out.get(c) for c in COLLECTED}
        for rows in logs.values()
        for out in reduce_rows(store.catalog, rows, 1, owners_given=False)
        if out["row_type"] in COLLECT
    ]
    table = pa.Table.from_pylist(reduced)
    assert rows_in_order(table.to_pylist()) == rows_in_order(expected)
    assert any(row["row_type"] == "instance" for row in reduced)


def test_a_log_that_did_not_only_grow_fails_its_schema_by_name(store: Store) -> None:
    """An increment reduces a log's messages of the built batches once, as the prefix
    of the log they are. Were a newer message before an older one (a log that did not
    only grow, which `increments` builds whole), the log's reduction fails and says so,
    rather than read a prefix off that is none."""
    logs: dict[tuple[object, object], list[Row]] = {}
    for row in sorted(store.messages, key=lambda r: cast(int, r["seq"])):
        row = {**row, "owner_author": None, "owner_log": None}
        logs.setdefault((row["author"], row["log_id"]), []).append(row)
    rows = next(rows for rows in logs.values() if len(rows) >= 2)
    grown = [{**row, "batch": 1} for row in rows[:-1]] + [{**rows[-1], "batch": 2}]
    assert all(r["row_type"] != "error" for r in reduce_rows(store.catalog, grown, 1))
    swapped = [{**rows[0], "batch": 2}] + [{**row, "batch": 1} for row in rows[1:]]
    (error,) = reduce_rows(store.catalog, swapped, 1)
    assert error["row_type"] == "error" and "did not only grow" in cast(str, error["message"])
