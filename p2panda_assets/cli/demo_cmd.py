"""`panda demo`: the product's main job on the embedded defaults, shown end to end.

For now (foundation): author a slothmail schema log and an instance log with a fresh key,
then decode, verify and chain-check every entry as a reader would, and print them."""

from __future__ import annotations

import argparse
import json

from p2panda_assets.cli.entry_cmd import entry_json
from p2panda_assets.protocol.entry import verify_entry
from p2panda_assets.protocol.keys import KeyPair
from p2panda_assets.protocol.log import validate_log
from p2panda_assets.protocol.log_writer import LogWriter


def register(subparsers: argparse._SubParsersAction) -> None:
    demo = subparsers.add_parser("demo", help="run the main job on the embedded defaults")
    demo.set_defaults(run=run_demo)


def run_demo(args: argparse.Namespace) -> int:
    key_pair = KeyPair.generate()
    payloads = [f"slothmail entry {seq}".encode() for seq in range(1, 6)]
    writer = LogWriter(key_pair, 12)
    raws = [writer.append(payload) for payload in payloads]
    verdict = validate_log(verify_entry(raw, p) for raw, p in zip(raws, payloads, strict=True))
    for entry in verdict.accepted:
        print(json.dumps(entry_json(entry)))
    print(
        f"{len(verdict.accepted)} entries accepted, {len(verdict.rejected)} rejected, "
        f"{len(verdict.pending)} pending"
    )
    return 0
