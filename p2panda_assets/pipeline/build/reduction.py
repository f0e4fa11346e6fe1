"""The reduction of instance logs in Spark: one group per log through the engine's
`reduce_instance_log`, each instance out as a table row with what cascades, accounts
and fallback counts need. Whole builds and incremental ones share it
(`reduce_instance_logs`)."""

from __future__ import annotations

import pickle
import traceback
from collections.abc import Iterable, Iterator, Sequence
from decimal import Decimal
from typing import cast

import pyarrow as pa
from pyspark import Broadcast, StorageLevel
from pyspark.sql import DataFrame
from pyspark.sql import Row as SparkRow
from pyspark.sql import functions as F

from p2panda_assets.engine.cascade import cascade_fields
from p2panda_assets.engine.corpus import (
    Catalog,
    ChainedLog,
    applied_if_live,
    message_state,
    reduce_instance_log,
    reduction_accounts,
)
from p2panda_assets.engine.instances import Instance, OwnerLookup
from p2panda_assets.engine.lens import Lens
from p2panda_assets.pipeline.build import increments
from p2panda_assets.pipeline.index.chaining import account_rows, items_log
from p2panda_assets.pipeline.postgres.copy import Columns
from p2panda_assets.pipeline.spark.frames import local_frame
from p2panda_assets.pipeline.spark.groups import Row, arrow_schema, map_groups
from p2panda_assets.tuning import tuning

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
# The columns of the reduced rows that the builds collect to the driver.
COLLECTED = (
    "row_type",
    "schema",
    "hash",
    "deleted",
    "cascade_target",
    "cascade_ref",
    "fell_back",
    "message",
)


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
        reduction = reduce_instance_log(catalog, schema_id, log, owner_of)
        out = instance_rows(catalog, schema_id, reduction.instances.values())
        if built_batch is not None:
            out += _before_rows(catalog, schema_id, log, entries, built_batch, owner_of)
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


def _before_rows(
    catalog: Catalog,
    schema_id: str,
    log: ChainedLog,
    rows: list[Row],
    built_batch: int,
    owners: OwnerLookup,
) -> list[Row]:
    """The instances as the messages of batches up to `built_batch` made them. A log's
    messages of later batches all follow its earlier ones (the chain only grows), so
    this is the reduction of a prefix of `log` (its messages decoded once, for both
    reductions: they are immutable)."""
    earlier = {cast(bytes, row["hash"]) for row in rows if cast(int, row["batch"]) <= built_batch}
    if not earlier:
        return []
    prefix = ChainedLog(log.author, log.log_id, [i for i in log.items if i[1] in earlier], {})
    reduction = reduce_instance_log(catalog, schema_id, prefix, owners)
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


def reduce_logs(
    items: DataFrame,
    broadcast: Broadcast[Catalog],
    *,
    incremental: bool = False,
    owners_given: bool = True,
) -> DataFrame:
    """`reduce_rows` for every log of `items`; `incremental`: the items carry the batch
    their schema's table was built up to (`built_batch`), and `before` rows come out.
    Without `owners_given`, the items carry no owner rows (`with_owners`)."""

    def reduce_group(rows: list[Row]) -> list[Row]:
        built = cast(int, rows[0]["built_batch"]) if incremental else None
        return reduce_rows(broadcast.value, rows, built, owners_given=owners_given)

    if not owners_given:
        items = items.withColumns(
            {
                "owner_author": F.lit(None).cast("binary"),
                "owner_log": F.lit(None).cast("decimal(20,0)"),
            }
        )
    columns = [*REDUCE_INPUT, "built_batch"] if incremental else list(REDUCE_INPUT)
    return map_groups(
        items.select(*columns), ("author", "log_id"), ("seq",), reduce_group, REDUCED_ARROW
    )


def reduce_instance_logs(
    items: DataFrame,
    decoded: DataFrame,
    broadcast: Broadcast[Catalog],
    collect: Sequence[str],
    *,
    incremental: bool = False,
) -> tuple[DataFrame, list[SparkRow]]:
    """Every log of `items` reduced (`reduce_logs`), on disk (not in the JVM's heap: it
    holds every row of every table, pickled), and its rows whose type is in `collect`
    (columns `COLLECTED`), collected.

    The engine looks an instance's owner up only to tell why an update or delete of an
    instance the log did not create is rejected; a sound log never does. So the logs
    are reduced without owner rows first, and only those that looked an owner up are
    reduced again, with the owners of what they looked up (`with_owners`). The join of
    every named instance with every create of the store is paid by any build, however
    few its schemas: one schema's 55k messages in the bench's store of 1M reduced in
    4.0-4.5 s without it against 6.6-9.2 s with it (three pairs, one warm session); all
    20 schemas in 49-54 s either way. Rule A-ONCE (docs/semantics.md)."""
    first = reduce_logs(items, broadcast, incremental=incremental, owners_given=False)
    first = first.persist(StorageLevel.DISK_ONLY)
    rows = _collected(first, [*collect, OWNERS])
    looking = [row for row in rows if row["row_type"] == OWNERS]
    if not looking:
        return first, rows
    spark = items.sparkSession
    logs = local_frame(
        spark,
        sorted({(bytes(row["author"]), row["log_id"]) for row in looking}),
        "author binary, log_id decimal(20,0)",
    )
    again = items.join(F.broadcast(logs), ["author", "log_id"], "left_semi")
    instances = {bytes(row["hash"]) for row in looking}
    second = reduce_logs(with_owners(again, decoded, instances), broadcast, incremental=incremental)
    second = second.persist(StorageLevel.DISK_ONLY)
    rows = [row for row in rows if row["row_type"] != OWNERS]
    rows += _collected(second, collect)
    return first.filter(F.col("row_type") != OWNERS).unionByName(second), rows


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


def _collected(reduced: DataFrame, row_types: Sequence[str]) -> list[SparkRow]:
    """The reduced rows of `row_types`, in the driver (an `owners` row with its log)."""
    wanted = reduced.filter(F.col("row_type").isin(*row_types))
    return wanted.select(*COLLECTED, "author", "log_id").collect()


def with_owners(items: DataFrame, decoded: DataFrame, instances: set[bytes]) -> DataFrame:
    """The items, and beside them an owner row for each update and delete whose create
    (anywhere in the store, chain-accepted) is found: the update's log, the instance,
    and the log of its create (`owner_author`, `owner_log`), the engine's owner lookup
    for `not-author`. The rows of a log group together in `reduce_logs`.

    Only the narrow columns are joined: the items, with their payloads, are shuffled
    once, by the grouping, not a second time by the join of each with its create.

    `instances`: the instances whose owners are wanted. The creates of those alone are
    looked up, by broadcast, instead of a join that shuffles every create of the store."""
    creates = decoded.filter(F.col("kind") == "create")
    if len(instances) <= tuning().broadcast_keys:
        creates = F.broadcast(increments.among(creates, "hash", instances))
    owners = creates.select(
        F.col("hash").alias("instance"),
        F.col("author").alias("owner_author"),
        F.col("log_id").alias("owner_log"),
    )
    group = [c for c in ("author", "log_id", "schema", "built_batch") if c in items.columns]
    named = items.filter(F.col("instance").isNotNull()).select(*group, "instance")
    return items.unionByName(named.join(owners, "instance"), allowMissingColumns=True)
