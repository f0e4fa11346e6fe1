"""`panda preview FILE... --schema SCHEMA_ID`: the rows a schema's table would hold,
computed by the pure engine (no Spark, no database)."""

from __future__ import annotations

import argparse
import json
import sys

from p2panda_assets.engine.corpus import reduce_corpus
from p2panda_assets.engine.preview import row_json
from p2panda_assets.errors import P2pandaError, Reason
from p2panda_assets.jsonlines import BadLine, read_entry_lines


def register(subparsers: argparse._SubParsersAction) -> None:
    preview = subparsers.add_parser("preview", help="rows a schema's table would hold")
    preview.add_argument("files", nargs="+", metavar="FILE", help="JSON lines of entries")
    preview.add_argument("--schema", required=True, metavar="SCHEMA_ID")
    preview.add_argument(
        "--trace", action="store_true", help="add _entry: the entry that last wrote each row"
    )
    preview.set_defaults(run=run_preview)


def run_preview(args: argparse.Namespace) -> int:
    pairs = []
    for item in read_entry_lines(args.files):
        if isinstance(item, BadLine):
            print(
                f"warning: {item.error.reason}: {item.path}:{item.line}: {item.error.message}",
                file=sys.stderr,
            )
        else:
            pairs.append(item)
    corpus = reduce_corpus(pairs)
    table = corpus.tables.get(args.schema)
    if table is None:
        why = corpus.waiting.get(args.schema)
        if why is not None:
            raise P2pandaError(why.reason, why.message)
        raise P2pandaError(Reason.AWAITING_SCHEMA, f"no schema {args.schema} in the input")
    for row in table.rows:
        print(json.dumps(row_json(table, row, args.trace), ensure_ascii=False))
    return 0
