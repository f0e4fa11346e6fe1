"""The driver path of an incremental build: the relational steps of
`building.build_increments` in the process that runs it, with pyarrow, for a small
increment (`pipeline.build.paths.choose_steps`). No Spark job is launched.

Every rule is the Spark path's own: each log is reduced by `reduce.reduce_rows`, the
accounts and deleted sets come from `reduce.accounts_of` and `deleted_of`, and the
rows are written by `copy.copy_batches`, the writer each Spark partition runs. What
differs is only how rows are found and grouped: a filtered read of the chained layers
(`arrow_io`) and `pyarrow.compute` in place of Spark's scans, filters and joins, and
a sort in place of its shuffle. `tests/pipeline/test_incremental_matches_engine.py`
holds both paths to `reduce_corpus`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import cast

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from p2panda_assets.engine.corpus import Catalog
from p2panda_assets.pipeline.columnar.arrow_io import LAYER_ARROW, scan
from p2panda_assets.pipeline.columnar.key_index import located, read_layers
from p2panda_assets.pipeline.kernels.batches import Row, arrow_schema, output_batches, python_rows
from p2panda_assets.pipeline.kernels.declared import (
    MESSAGE_KEY,
    NEW_WITHOUT_KEY,
    And,
    after,
    assigned_to,
    evaluated,
    expression,
    touched_anew,
    touched_before,
)
from p2panda_assets.pipeline.kernels.reduce import (
    ACCOUNTED,
    OWNERS,
    REDUCE_INPUT,
    REDUCED_ARROW,
    reduce_rows,
)
from p2panda_assets.pipeline.postgres.copy import CopyResult, Derived, copy_locally
from p2panda_assets.store.copying import Target

ROWS_AT_A_TIME = 2_000  # Python rows the driver path holds of a batch at once

# What the driver path reads of each message it reduces: the reduction's input (less the
# owner columns, which it adds), and what finds the messages.
READ = (*(c for c in REDUCE_INPUT if c not in ("owner_author", "owner_log")), "kind")


def new_keys_locally(layers: Sequence[str], after_batch: int) -> set[bytes]:
    """`increments.new_keys` of the chained `layers`: the instances that messages of
    batches after `after_batch` create or name."""
    dataset = read_layers(layers)
    if dataset is None:
        return set()
    table = scan(dataset, ["instance", "kind", "hash"], expression(after(after_batch)))
    keys = evaluated(table, MESSAGE_KEY).to_pylist()
    return {cast(bytes, key) for key in keys if key is not None}


def touched_locally(
    layers: Sequence[str], increments: Mapping[str, int], keys: set[bytes]
) -> pa.Table:
    """`increments.touched_messages` of the chained `layers` (their roots): every
    assigned message of the increments' schemas that creates or names one of `keys`, and
    their new messages that name none, each with `built_batch`: a table in log order
    (author, log, seq).

    Two reads, each filtered as pyarrow reads it: the messages of batches after the
    oldest table's (`touched_anew`: the batch statistics skip the older layers' row
    groups) and the older messages that name a key (`touched_before`), where each
    layer's key index says they are (`key_index.located`: all of a layer without one,
    or where the keys name most of it). Scanning every message of the schemas instead
    cost ~0.4 s of a live run on the 1M store, growing with the store; the driver holds
    what the filters keep, a batch of the rest at a time."""
    named = pa.array(list(keys), pa.binary())
    schemas = list(increments)
    anew = read_layers(layers)
    if anew is None:
        return _touched(LAYER_ARROW.empty_table().select(list(READ)), increments, named)
    before = ds.dataset([located(root, keys, schemas) for root in layers])
    built = increments.values()
    parts = [
        scan(dataset, list(READ), expression(And(assigned_to(schemas), rule)))
        for dataset, rule in ((anew, touched_anew(built)), (before, touched_before(keys, built)))
    ]
    touched = _touched(pa.concat_tables(parts), increments, named)
    return touched.sort_by([("author", "ascending"), ("log_id", "ascending"), ("seq", "ascending")])


def _touched(messages: pa.Table, increments: Mapping[str, int], named: pa.Array) -> pa.Table:
    """The `messages` an increment reduces again (`touched_locally`), with `built_batch`."""
    schemas = cast(list[str], messages["schema"].to_pylist())
    built = pa.array([increments[s] for s in schemas], pa.int64())
    keyed = messages.append_column("built_batch", built)
    keyed = keyed.append_column("key", evaluated(keyed, MESSAGE_KEY))
    marked = pc.fill_null(pc.is_in(keyed["key"], value_set=named), pa.scalar(False))
    wanted = pc.or_(cast(pa.ChunkedArray, marked), evaluated(keyed, NEW_WITHOUT_KEY))
    return keyed.filter(wanted).drop_columns(["key"])


def reduce_locally(catalog: Catalog, touched: pa.Table, layers: Sequence[str]) -> pa.Table:
    """`reduction.reduce_instance_logs` of the `touched` messages (incremental, in log
    order): every log reduced by `reduce_rows` without owner rows, and the logs that
    looked an owner up reduced again with the owners of what they looked up, found among
    the creates of the chained `layers`. Streamed: a batch of the messages as Python rows
    at a time, the reduced rows kept as Arrow batches (`REDUCED_ARROW`), as compact as
    Spark's. Rule A-ONCE (docs/semantics.md)."""
    looked_up: set[bytes] = set()
    looking: list[list[Row]] = []  # the logs that looked an owner up: reduced again

    def reduced() -> Iterator[list[Row]]:
        for rows in _logs(touched):
            out = _reduce_log(catalog, rows, owners_given=False)
            if out and out[0]["row_type"] == OWNERS:  # only owners rows come back then
                looked_up.update(cast(bytes, row["hash"]) for row in out)
                looking.append(rows)
            else:
                yield out
        if looking:
            owners = _owners_of(looked_up, layers)
            for rows in looking:
                yield _reduce_log(catalog, rows + _owner_rows(rows, owners), owners_given=True)

    return pa.Table.from_batches(list(output_batches(reduced(), REDUCED_ARROW)), REDUCED_ARROW)


def _logs(touched: pa.Table) -> Iterator[list[Row]]:
    """The rows of each log of `touched` (in log order), as `map_groups` gives a group:
    a batch at a time made Python rows, a log whole however the batches cut it."""
    group: list[Row] = []
    current: object = None
    for batch in touched.to_batches(max_chunksize=ROWS_AT_A_TIME):
        for row in python_rows(batch):
            row["owner_author"] = row["owner_log"] = None
            key = (row["author"], row["log_id"])
            if group and key != current:
                yield group
                group = []
            current = key
            group.append(row)
    if group:
        yield group


def _reduce_log(catalog: Catalog, rows: list[Row], *, owners_given: bool) -> list[Row]:
    built = cast(int, rows[0]["built_batch"])
    return reduce_rows(catalog, rows, built, owners_given=owners_given)


def _owners_of(instances: set[bytes], layers: Sequence[str]) -> dict[bytes, tuple[bytes, int]]:
    """The log of the create of each of `instances` found in the chained `layers`
    (`with_owners`), where their key indexes say (a create's key is its hash)."""
    if not layers:
        return {}
    store = ds.dataset([located(root, instances, None) for root in layers])
    wanted = (ds.field("kind") == "create") & ds.field("hash").isin(
        pa.array(list(instances), pa.binary())
    )
    table = scan(store, ["hash", "author", "log_id"], wanted)
    return {
        cast(bytes, row["hash"]): (cast(bytes, row["author"]), cast(int, row["log_id"]))
        for batch in table.to_batches()
        for row in python_rows(batch)
    }


def _owner_rows(rows: list[Row], owners: Mapping[bytes, tuple[bytes, int]]) -> list[Row]:
    """An owner row for each message of the log that names an instance whose create is
    known (`with_owners`)."""
    found = []
    for row in rows:
        instance = cast(bytes | None, row["instance"])
        if instance is not None and instance in owners:
            owner_author, owner_log = owners[instance]
            found.append(
                {
                    **{column: None for column in row},
                    **{c: row[c] for c in ("author", "log_id", "schema", "built_batch")},
                    "instance": instance,
                    "owner_author": owner_author,
                    "owner_log": owner_log,
                }
            )
    return found


# The reduced rows as the copy reads them (`staging.stage_reduced`'s columns).
STAGED_ARROW = arrow_schema(
    [
        ("dest", pa.string()),
        ("row", pa.binary()),
        ("fell_back", pa.list_(pa.string())),
        ("row_type", pa.string()),
        ("schema", pa.string()),
        ("hash", pa.binary()),
        ("messages", pa.list_(pa.binary())),
        ("shaping", pa.list_(pa.binary())),
        ("state", pa.string()),
        ("reason", pa.string()),
        ("message", pa.string()),
        ("live", pa.bool_()),
    ]
)


def stage_locally(
    url: str,
    reduced: pa.Table,
    ok: Sequence[str],
    gone: set[tuple[str, bytes]],
    targets: dict[str, Target],
    derived: Sequence[Derived],
) -> CopyResult:
    """`staging.stage_reduced` of the reduced rows the driver holds: each live
    instance's row into its schema's target, and `derived` (the accounts) from every
    row, by the writer of the Spark path (`copy_locally`), a batch at a time. `gone`:
    the (schema, instance) pairs the cascades left deleted."""
    kept = set(ok)

    def staged() -> Iterator[pa.RecordBatch]:
        for batch in reduced.to_batches(max_chunksize=ROWS_AT_A_TIME):
            rows = []
            for row in batch.to_pylist():
                if row["row_type"] not in ("instance", "account") or row["schema"] not in kept:
                    continue
                live = not row["deleted"] and (row["schema"], row["hash"]) not in gone
                is_row = row["row_type"] == "instance" and live and row["schema"] in targets
                rows.append(
                    {
                        **{column: row[column] for column in ACCOUNTED},
                        "dest": row["schema"] if is_row else None,
                        "row": row["row"] if is_row else None,
                        "fell_back": row["fell_back"],
                        "live": live,
                    }
                )
            yield pa.RecordBatch.from_pylist(rows, schema=STAGED_ARROW)

    return copy_locally(staged(), url, targets, tally="fell_back", derived=derived)
