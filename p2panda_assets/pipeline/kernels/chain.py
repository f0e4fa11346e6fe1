"""The chain rules over one log's verified entries, as both paths of the index step run
them: `chain_group` puts a log through the engine's `chain_entries` and gives back its
summary row, where it now stands (its tip) and an account per entry the rules reject or
hold; `chain_locally` does it for rows the process holds, `index.chaining.chain_logs`
for a Spark frame. Also the columns chaining reads and writes; `index.log_plan` plans
the logs from their summary rows."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import cast

import pyarrow as pa

from p2panda_assets.engine.corpus import (
    Accounts,
    ChainedLog,
    LogItem,
    LogKey,
    chain_entries,
    log_summary,
)
from p2panda_assets.pipeline.kernels.batches import (
    Row,
    arrow_schema,
    map_groups_locally,
)
from p2panda_assets.pipeline.kernels.digests import entry_bits
from p2panda_assets.pipeline.kernels.packed import message_of
from p2panda_assets.protocol.entry import decode_entry
from p2panda_assets.protocol.ids import parse_schema_id
from p2panda_assets.protocol.log import EntryLinks, LogTip
from p2panda_assets.protocol.messages import SchemaHashRef, SchemaVersionRef, VersionedSchema

# What chaining reads of each verified entry: its links and what verification indexed of
# its message (`entry`: only in batches verified before the links were kept). Not the
# payload: the accepted entries' payloads go from the verified batches to the chained
# layer directly (`accepted_entries`), never through the chain step's shuffle and its
# Python workers.
CHAIN_INPUT = (
    "author",
    "log_id",
    "seq",
    "hash",
    "backlink",
    "lipmaa_link",
    "end_of_log",
    "entry",
    "kind",
    "schema_id",
    "schema_version",
    "schema_hash",
    "message_error",
    "batch",
)


# One row per log (`log`: its summary and where it now stands; `held`: how many of its
# entries the chain rules rejected or hold; `unexplained`: how many of its accepted ones
# do not decode and come from a batch that did not keep why; `batch_sums`: its accepted
# entries counted and summed by batch, `digests.LogSums` as JSON) and per entry
# rejected or held (`account`).
CHAIN_ARROW = arrow_schema(
    [
        ("row_type", pa.string()),
        ("author", pa.binary()),
        ("log_id", pa.decimal128(20, 0)),
        ("hash", pa.binary()),
        ("is_schema", pa.bool_()),
        ("ref_schema_id", pa.string()),
        ("ref_version", pa.decimal128(20, 0)),
        ("ref_hash", pa.binary()),
        ("tip_seq", pa.decimal128(20, 0)),
        ("tip_ended", pa.bool_()),
        ("held", pa.int64()),
        ("unexplained", pa.int64()),
        ("batch_sums", pa.string()),
        ("state", pa.string()),
        ("reason", pa.string()),
        ("message", pa.string()),
    ]
)


def ref_columns(ref: VersionedSchema | None) -> tuple[str | None, int | None, bytes | None]:
    """A schema reference as (schema id, version, hash) columns: one of the two forms."""
    if isinstance(ref, SchemaVersionRef):
        return ref.schema_id, ref.version, None
    if isinstance(ref, SchemaHashRef):
        return None, None, ref.hash
    return None, None, None


def ref_from_columns(
    schema_id: str | None, version: int | Decimal | None, schema_hash: bytes | None
) -> VersionedSchema | None:
    if schema_hash is not None:
        return SchemaHashRef(bytes(schema_hash))
    if schema_id is None or version is None:
        return None
    return SchemaVersionRef(*parse_schema_id(schema_id), int(version))


def account_rows(accounts: Accounts) -> list[dict[str, object]]:
    return [
        {
            "hash": h,
            "schema_id": a.schema_id,
            "state": str(a.state),
            "reason": None if a.reason is None else str(a.reason),
            "message": a.message,
        }
        for h, a in accounts.items()
    ]


def chain_group(rows: list[Row]) -> list[Row]:
    """One log through the engine's chain rules (`chain_entries`, from its tip if the
    rows carry one): its summary and where it now stands, and the accounts of the
    entries the rules reject or hold. Every other entry of the group is accepted
    (`validate_log` gives each entry one verdict): `accepted_entries` takes them from the
    verified batches. The messages are not decoded again: verification indexed each one
    (kind and schema; no kind: it does not decode), which is all the summary needs."""
    # Column types from the verified frame: binary -> bytes, decimal(20,0) -> int.
    author, log_id = cast(bytes, rows[0]["author"]), cast(int, rows[0]["log_id"])
    tip = tip_of(rows[0])
    log = chain_entries(map(links_of, rows), tip)
    by_hash = {row["hash"]: row for row in rows}
    accepted = [by_hash[entry.hash] for entry in log.accepted]
    key = {"author": author, "log_id": log_id}
    summary = log_summary(
        (cast(str, row["kind"]), indexed_ref(row)) for row in accepted if row["kind"] is not None
    )
    ref_id, ref_version, ref_hash = ref_columns(summary.first_ref)
    out: list[Row] = [
        {
            "row_type": "log",
            **key,
            "is_schema": summary.is_schema,
            "ref_schema_id": ref_id,
            "ref_version": ref_version,
            "ref_hash": ref_hash,
            "tip_seq": log.accepted[-1].seq_num if log.accepted else tip.seq if tip else 0,
            "tip_ended": log.ended,
            "held": len(log.accounts),
            "unexplained": sum(
                row["kind"] is None and row["message_error"] is None for row in accepted
            ),
            "batch_sums": json.dumps(_batch_sums(accepted)),
        }
    ]
    out += [{"row_type": "account", **key, **row} for row in account_rows(log.accounts)]
    return out


def _batch_sums(accepted: list[Row]) -> list[tuple[int, int, int]]:
    """(batch, count, bits) of a log's accepted entries: its part of the sums of the
    layer they are written to (`digests.sums_of_layer`)."""
    sums: dict[int, tuple[int, int]] = {}
    for row in accepted:
        batch = cast(int, row["batch"])
        count, bits = sums.get(batch, (0, 0))
        sums[batch] = (count + 1, bits + entry_bits(cast(bytes, row["hash"])))
    return [(batch, count, bits) for batch, (count, bits) in sorted(sums.items())]


def links_of(row: Row) -> EntryLinks:
    """A verified entry's links, as verification kept them (or, in a batch verified
    before it kept them, decoded from the entry's bytes)."""
    if row["end_of_log"] is None:
        return EntryLinks.of(decode_entry(cast(bytes, row["entry"])))
    return EntryLinks(
        cast(int, row["seq"]),
        cast(bytes, row["hash"]),
        cast(bytes | None, row["backlink"]),
        cast(bytes | None, row["lipmaa_link"]),
        bool(row["end_of_log"]),
    )


def indexed_ref(row: Row) -> VersionedSchema | None:
    """The schema a message names, as verification indexed it."""
    return ref_from_columns(
        cast(str | None, row["schema_id"]),
        cast(int | None, row["schema_version"]),
        cast(bytes | None, row["schema_hash"]),
    )


def tip_of(row: Row) -> LogTip | None:
    """The tip a log is continued from, as `tips_frame` joins it to its new entries."""
    if row.get("tip_seq") is None:
        return None
    hashes = json.loads(cast(str, row["tip_hashes"]))
    return LogTip(
        cast(int, row["tip_seq"]),
        bool(row["tip_ended"]),
        {int(seq): bytes.fromhex(h) for seq, h in hashes.items()},
    )


def items_log(rows: list[Row]) -> ChainedLog:
    """A log's chained rows back as the engine's `ChainedLog`, each message as
    verification decoded it (`packed.message_of`: a payload is decoded only where
    nothing was kept)."""
    # Column types as `map_groups` gives them: binary -> bytes, decimal(20,0) -> int.
    items: list[LogItem] = [
        (
            cast(int, row["seq"]),
            cast(bytes, row["hash"]),
            message_of(cast(bytes | None, row.get("message")), cast(bytes | None, row["payload"])),
        )
        for row in sorted(rows, key=lambda r: cast(int, r["seq"]))
    ]
    author, log_id = cast(bytes, rows[0]["author"]), cast(int, rows[0]["log_id"])
    return ChainedLog(author, log_id, items, {})


# The columns `tips_frame` joins to a continued log's new entries.
TIP_COLUMNS = ("tip_seq", "tip_ended", "tip_hashes")


def tip_columns(tip: LogTip) -> tuple[int, bool, str]:
    """A tip as the `TIP_COLUMNS` give it to `tip_of`."""
    return tip.seq, tip.ended, json.dumps({str(seq): h.hex() for seq, h in tip.hashes.items()})


def chain_locally(rows: list[Row], tips: dict[LogKey, LogTip]) -> pa.Table:
    """`chain_group` of every log of `rows` (as `python_rows` gives them), continued from
    its tip in `tips`, in this process: `CHAIN_ARROW` rows."""
    for row in rows:
        tip = tips.get((cast(bytes, row["author"]), cast(int, row["log_id"])))
        if tip is not None:
            row.update(zip(TIP_COLUMNS, tip_columns(tip), strict=True))
    return map_groups_locally(rows, ("author", "log_id"), ("seq",), chain_group, CHAIN_ARROW)
