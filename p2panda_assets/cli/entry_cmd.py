"""`panda entry decode [HEX]`: one entry as JSON, with its signature checked."""

from __future__ import annotations

import argparse
import json
import sys

from p2panda_assets.errors import P2pandaError, Reason
from p2panda_assets.protocol.entry import Entry, check_signature, decode_entry


def register(subparsers: argparse._SubParsersAction) -> None:
    entry = subparsers.add_parser("entry", help="inspect bamboo entries")
    actions = entry.add_subparsers(dest="entry_command", required=True)
    decode = actions.add_parser("decode", help="decode and verify one entry (hex, or stdin)")
    decode.add_argument("hex", nargs="?", help="entry bytes as hex; read from stdin if absent")
    decode.set_defaults(run=run_decode)


def parse_hex(text: str, what: str) -> bytes:
    try:
        return bytes.fromhex(text.strip())
    except ValueError:
        raise P2pandaError(Reason.BAD_HEX, f"{what} is not hex") from None


def entry_json(entry: Entry) -> dict[str, object]:
    """The JSON form of an entry (rule P-ENTRY-JSON): hex strings, null where absent."""

    def hex_or_none(value: bytes | None) -> str | None:
        return None if value is None else value.hex()

    return {
        "author": entry.author.hex(),
        "log_id": entry.log_id,
        "seq_num": entry.seq_num,
        "lipmaa_link": hex_or_none(entry.lipmaa_link),
        "backlink": hex_or_none(entry.backlink),
        "payload_size": entry.payload_size,
        "payload_hash": entry.payload_hash.hex(),
        "signature": entry.signature.hex(),
        "hash": entry.hash.hex(),
    }


def run_decode(args: argparse.Namespace) -> int:
    text = args.hex if args.hex is not None else sys.stdin.read()
    entry = decode_entry(parse_hex(text, "the entry"))
    check_signature(entry)
    print(json.dumps(entry_json(entry)))
    return 0
