"""The reduction of one instance log, as both paths of a build run it: `reduce_rows`
puts the log through the engine's `reduce_instance_log` and gives each instance as a
table row with what cascades, accounts and fallback counts need; `accounts_of` and
`deleted_of` make the accounts and the deleted set of a batch of reduced rows. Spark
runs them per group and per partition (`build.reduction`, `build.staging`), the driver
path over the rows it holds (`build.driver_path`)."""

from __future__ import annotations

import pickle
import traceback
from collections.abc import Iterable, Iterator
from decimal import Decimal
from typing import cast

import pyarrow as pa

from p2panda_assets.engine.cascade import cascade_fields
from p2panda_assets.engine.corpus import (
    Catalog,
    ChainedLog,
    applied_if_live,
    message_state,
    reduce_instance_log,
    reduction_accounts,
)
from p2panda_assets.engine.instances import Instance, LogReduction, OwnerLookup
from p2panda_assets.engine.lens import Lens
from p2panda_assets.pipeline.kernels.batches import Columns, Row, arrow_schema
from p2panda_assets.pipeline.kernels.chain import account_rows, items_log

REDUCED_ARROW = arrow_schema(
    [
        ("row_type", pa.string()),  # instance | before | account | error
        ("schema", pa.string()),
        ("hash", pa.binary()),
        ("deleted", pa.bool_()),
        ("cascade_target", pa.list_(pa.string())),
        ("cascade_ref", pa.list_(pa.binary())),
        ("messages", pa.list_(pa.binary())),
        ("shaping", pa.list_(pa.binary())),
        ("fell_back", pa.list_(pa.string())),
        ("row", pa.binary()),  # the table row, pickled engine values
        ("state", pa.string()),
        ("reason", pa.string()),
        ("message", pa.string()),
        ("author", pa.binary()),  # the log of an `owners` row
        ("log_id", pa.decimal128(20, 0)),
    ]
)


OWNERS = "owners"


def instance_rows(catalog: Catalog, schema_id: str, instances: Iterable[Instance]) -> list[Row]:
    """The reduced instances of one of the schema's logs as `instance` rows. The lens and
    its cascade fields are looked up once for them all, not once an instance: that was a
    quarter of the time making these rows (py-spy samples of bench/pipeline.py at 300k,
    102 against 76)."""
    lens = catalog.histories[schema_id].lens
    cascades = cascade_fields(lens, catalog.hash_index)
    return [_instance_row(lens, cascades, schema_id, instance) for instance in instances]


def _instance_row(
    lens: Lens, cascades: list[tuple[str, str | None]], schema_id: str, instance: Instance
) -> Row:
    targets, refs = [], []
    for name, target in cascades:
        value = instance.values.get(name)
        for hex_id in value if isinstance(value, tuple) else (value,):
            if isinstance(hex_id, str):
                targets.append(target)
                refs.append(bytes.fromhex(hex_id))
    row = (
        instance.id.hex(),
        instance.author.hex(),
        instance.version,
        Decimal(instance.seq),
        instance.messages[-1].hex(),
        *(instance.values.get(name) for name in lens),
    )
    return {
        "row_type": "instance",
        "schema": schema_id,
        "hash": instance.id,
        "deleted": instance.deleted_by is not None,
        "cascade_target": targets,
        "cascade_ref": refs,
        "messages": instance.messages,
        "shaping": sorted(applied_if_live(instance, lens)),
        "fell_back": sorted(instance.fell_back),
        "row": pickle.dumps(row, protocol=pickle.HIGHEST_PROTOCOL),
    }


def reduce_rows(
    catalog: Catalog,
    rows: list[Row],
    built_batch: int | None = None,
    *,
    owners_given: bool = True,
) -> list[Row]:
    """One instance log through the engine's `reduce_instance_log`: its instances as
    table rows (with what cascades and accounts need), and its entries' accounts.
    `rows`: the log's entries, and its owner rows (`with_owners`).

    With `built_batch` (an incremental build), also each instance as the messages of
    batches up to it made it (`before` rows): what the table holds of it now.

    Without `owners_given` the rows carry no owner rows: a log that looks an instance's
    owner up gives back one `owners` row per instance it looked up instead of its
    reduction, to be reduced again with their owners (`reduce_instance_logs`)."""
    # Column types as `map_groups` gives them: string -> str, binary -> bytes, decimal -> int.
    schema_id = cast(str, rows[0]["schema"])
    entries = [row for row in rows if row["owner_author"] is None]
    try:
        owners = _owners(rows)
        looked_up: set[bytes] = set()

        def owner_of(instance_id: bytes) -> tuple[bytes, int] | None:
            looked_up.add(instance_id)
            return owners.get(instance_id)

        log = items_log(entries)
        before: list[Row] = []
        if built_batch is None:
            reduction = reduce_instance_log(catalog, schema_id, log, owner_of)
        else:
            reduction, before = _reduced_since(
                catalog, schema_id, log, entries, built_batch, owner_of
            )
        out = instance_rows(catalog, schema_id, reduction.instances.values()) + before
    except Exception as error:  # one log's failure fails only its schema
        detail = "".join(traceback.format_exception_only(error)).strip()
        return [{"row_type": "error", "schema": schema_id, "message": detail}]
    if looked_up and not owners_given:
        key = {"author": log.author, "log_id": log.log_id}
        return [{"row_type": OWNERS, "schema": schema_id, "hash": i, **key} for i in looked_up]
    for row in account_rows(reduction_accounts(reduction, schema_id)):
        out.append({"row_type": "account", "schema": schema_id, **row})
    return out


def _owners(rows: list[Row]) -> dict[bytes, tuple[bytes, int]]:
    """The owner rows of a log's group as the engine's owner lookup."""
    return {
        cast(bytes, row["instance"]): (
            cast(bytes, row["owner_author"]),
            cast(int, row["owner_log"]),
        )
        for row in rows
        if row["owner_author"] is not None
    }


def _reduced_since(
    catalog: Catalog,
    schema_id: str,
    log: ChainedLog,
    rows: list[Row],
    built_batch: int,
    owners: OwnerLookup,
) -> tuple[LogReduction, list[Row]]:
    """The log reduced, and its instances as the messages of batches up to `built_batch`
    made them (`before` rows: what the table holds of them now), in one pass. An
    increment's log only grew at its tip (`increments`: a log whose earlier messages
    changed, a gap filled among them included, is built whole), so those messages are a
    prefix of it: the prefix is reduced, read off, and the reduction goes on with the
    rest (`reduce_log`'s `start`). Reducing the prefix apart cost the increment a quarter
    more than a whole build's reduction of the log (bench/reduce_rows.py: 1.26 -> 1.03)."""
    earlier = {cast(bytes, row["hash"]) for row in rows if cast(int, row["batch"]) <= built_batch}
    cut = next((n for n, item in enumerate(log.items) if item[1] not in earlier), len(log.items))
    if any(item[1] in earlier for item in log.items[cut:]):
        raise ValueError(
            f"log {log.author.hex()}/{log.log_id}: a message of batch {built_batch} or before"
            " follows a newer one, so the log did not only grow: build the schema whole"
        )
    head = ChainedLog(log.author, log.log_id, log.items[:cut], {})
    reduction = reduce_instance_log(catalog, schema_id, head, owners)
    before = _before_rows(schema_id, reduction)
    rest = ChainedLog(log.author, log.log_id, log.items[cut:], {})
    return reduce_instance_log(catalog, schema_id, rest, owners, start=reduction), before


def _before_rows(schema_id: str, reduction: LogReduction) -> list[Row]:
    """A `before` row of each instance of `reduction`, as it stands now (read before the
    reduction goes on: it changes its instances in place)."""
    return [
        {
            "row_type": "before",
            "schema": schema_id,
            "hash": instance.id,
            "deleted": instance.deleted_by is not None,
            "fell_back": sorted(instance.fell_back),
        }
        for instance in reduction.instances.values()
    ]


# The columns `reduce_rows` reads. Selected before the logs are grouped, so that the
# shuffle that groups them, and the scan below it, carry nothing else.
REDUCE_INPUT = (
    "author",
    "log_id",
    "seq",
    "hash",
    "batch",
    "payload",  # NULL where `message` keeps it decoded
    "message",
    "instance",
    "schema",
    "owner_author",
    "owner_log",
)


# The columns of the reduced rows `accounts_of` reads, `live` (after the cascades) besides.
ACCOUNTED = ("row_type", "schema", "hash", "messages", "shaping", "state", "reason", "message")


def accounts_of(columns: Columns) -> Iterator[tuple[object, ...]]:
    """The accounts (`copy.ACCOUNT_COLUMNS`) in one batch of reduced rows (`ACCOUNTED`
    and `live`): an `account` row's own, and each message of an `instance` row, applied
    or superseded as the engine's `message_state` decides; other rows have none."""
    rows = zip(*(columns[name] for name in (*ACCOUNTED, "live")), strict=True)
    for row_type, schema, hash_, messages, shaping, state, reason, message, live in rows:
        if row_type == "instance":
            shapes = set(shaping or ())
            for m in messages or ():
                yield (m, schema, message_state(m, bool(live), shapes).value, None, "")
        elif row_type == "account":
            yield (hash_, schema, state, reason, message)


def deleted_of(columns: Columns) -> Iterator[tuple[object, ...]]:
    """The deleted set's rows (schema, instance id) in one batch of reduced rows
    (`ACCOUNTED` and `live`): its `instance` rows that the cascades left deleted."""
    rows = zip(*(columns[name] for name in ("row_type", "schema", "hash", "live")), strict=True)
    for row_type, schema, hash_, live in rows:
        if row_type == "instance" and not live:
            yield (schema, hash_)
