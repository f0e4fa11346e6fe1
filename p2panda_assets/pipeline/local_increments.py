"""The driver path of an incremental build: the relational steps of
`materialize._build_increments` in the process that runs it, with pyarrow, for a small
increment (`driver_path.takes_driver_path`). No Spark job is launched.

Every rule is the Spark path's own: each log is reduced by `reduction.reduce_rows`, the
accounts and deleted sets come from `reduction.accounts_of` and `deleted_of`, and the
rows are written by `copy.copy_batches`, the writer each Spark partition runs. What
differs is only how rows are found and grouped: a filtered read of the chained layers
(`local_store`) and `pyarrow.compute` in place of Spark's scans, filters and joins, and
a sort in place of its shuffle. `tests/pipeline/test_incremental_matches_engine.py`
holds both paths to `reduce_corpus`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from itertools import groupby
from operator import itemgetter
from typing import cast

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from p2panda_assets.engine.corpus import Catalog
from p2panda_assets.pipeline.copy import CopyResult, Derived, Target, copy_locally
from p2panda_assets.pipeline.groups import Row, arrow_schema, python_rows
from p2panda_assets.pipeline.local_store import layers_dataset
from p2panda_assets.pipeline.reduction import ACCOUNTED, OWNERS, REDUCE_INPUT, reduce_rows
from p2panda_assets.statuses import Assignment

# What the driver path reads of each message it reduces: the reduction's input (less the
# owner columns, which it adds), and what finds the messages.
READ = (*(c for c in REDUCE_INPUT if c not in ("owner_author", "owner_log")), "kind")


def message_keys(table: pa.Table) -> pa.ChunkedArray:
    """The instance each message creates or names (`instance`, or a create's own hash),
    null for none: `increments.new_keys` and `touched_messages`'s key, in Arrow."""
    created = pc.if_else(
        pc.equal(table["kind"], pa.scalar("create")), table["hash"], pa.scalar(None, pa.binary())
    )
    return pc.coalesce(table["instance"], created)


def new_keys_locally(layers: Sequence[str], after_batch: int) -> set[bytes]:
    """`increments.new_keys` of the chained `layers`: the instances that messages of
    batches after `after_batch` create or name."""
    dataset = layers_dataset(layers)
    if dataset is None:
        return set()
    table = dataset.to_table(
        columns=["instance", "kind", "hash"], filter=ds.field("batch") > after_batch
    )
    return {cast(bytes, key) for key in message_keys(table).to_pylist() if key is not None}


def touched_locally(
    layers: Sequence[str], increments: Mapping[str, int], keys: set[bytes]
) -> list[Row]:
    """`increments.touched_messages` of the chained `layers`: every assigned message of
    the increments' schemas that creates or names one of `keys`, and their new messages
    that name none, each with `built_batch`, as `python_rows` gives them."""
    dataset = layers_dataset(layers)
    if dataset is None:
        return []
    wanted = ds.field("schema").isin(list(increments)) & (
        ds.field("assignment") == Assignment.ASSIGNED.value
    )
    table = dataset.to_table(columns=list(READ), filter=wanted)
    schemas = cast(list[str], table["schema"].to_pylist())
    built = pa.array([increments[s] for s in schemas], pa.int64())
    key = message_keys(table)
    named = pc.is_in(key, value_set=pa.array(list(keys), pa.binary()))
    marked = pc.fill_null(named, pa.scalar(False))
    new_without_key = pc.and_(pc.greater(table["batch"], built), pc.is_null(key))
    wanted = pc.or_(cast(pa.ChunkedArray, marked), new_without_key)
    touched = table.append_column("built_batch", built).filter(wanted)
    return [row for batch in touched.to_batches() for row in python_rows(batch)]


def reduce_locally(catalog: Catalog, items: list[Row], layers: Sequence[str]) -> list[Row]:
    """`reduction.reduce_instance_logs` of `items` (incremental): every log reduced by
    `reduce_rows` without owner rows, and the logs that looked an owner up reduced again
    with the owners of what they looked up, found among the creates of `layers`.
    Rule A-ONCE (docs/semantics.md)."""
    for item in items:
        item["owner_author"] = item["owner_log"] = None
    logs = _logs(items)
    first = {key: _reduce_log(catalog, rows, owners_given=False) for key, rows in logs.items()}
    looking = [row for rows in first.values() for row in rows if row["row_type"] == OWNERS]
    if looking:
        owners = _owners_of({cast(bytes, row["hash"]) for row in looking}, layers)
        for key in {(row["author"], row["log_id"]) for row in looking}:
            rows = logs[cast(tuple[bytes, int], key)]
            first[cast(tuple[bytes, int], key)] = _reduce_log(
                catalog, rows + _owner_rows(rows, owners), owners_given=True
            )
    return [row for rows in first.values() for row in rows]


def _logs(items: list[Row]) -> dict[tuple[bytes, int], list[Row]]:
    """The items by log, each log's in seq order (`map_groups`' grouping)."""
    by_log = itemgetter("author", "log_id")
    ordered = sorted(items, key=itemgetter("author", "log_id", "seq"))
    return {cast(tuple[bytes, int], key): list(rows) for key, rows in groupby(ordered, key=by_log)}


def _reduce_log(catalog: Catalog, rows: list[Row], *, owners_given: bool) -> list[Row]:
    built = cast(int, rows[0]["built_batch"])
    return reduce_rows(catalog, rows, built, owners_given=owners_given)


def _owners_of(instances: set[bytes], layers: Sequence[str]) -> dict[bytes, tuple[bytes, int]]:
    """The log of the create of each of `instances` found in the store (`with_owners`)."""
    dataset = layers_dataset(layers)
    if dataset is None:
        return {}
    wanted = (ds.field("kind") == "create") & ds.field("hash").isin(
        pa.array(list(instances), pa.binary())
    )
    table = dataset.to_table(columns=["hash", "author", "log_id"], filter=wanted)
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


# The reduced rows as the copy reads them (`materialize._stage_reduced`'s columns).
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
    reduced: Iterable[Row],
    ok: Sequence[str],
    gone: set[tuple[str, bytes]],
    targets: dict[str, Target],
    derived: Sequence[Derived],
) -> CopyResult:
    """`materialize._stage_reduced` of rows the driver holds: each live instance's row
    into its schema's target, and `derived` (the accounts) from every row, by the
    writer of the Spark path (`copy_locally`). `gone`: the (schema, instance) pairs the
    cascades left deleted."""
    staged = []
    for row in reduced:
        if row["row_type"] not in ("instance", "account") or row["schema"] not in ok:
            continue
        live = not row.get("deleted") and (row["schema"], row["hash"]) not in gone
        is_row = row["row_type"] == "instance" and live and row["schema"] in targets
        staged.append(
            {
                **{column: row.get(column) for column in ACCOUNTED},
                "dest": row["schema"] if is_row else None,
                "row": row["row"] if is_row else None,
                "fell_back": row.get("fell_back"),
                "live": live,
            }
        )
    batch = pa.RecordBatch.from_pylist(staged, schema=STAGED_ARROW)
    return copy_locally([batch], url, targets, tally="fell_back", derived=derived)
