"""`panda preview FILE... --schema NAME|SCHEMA_ID`: the rows a schema's table would hold,
computed by the pure engine (no Spark, no database). A name is the one in the schema's
meta message, and must be carried by exactly one schema of the input."""

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
    preview.add_argument("--schema", required=True, metavar="NAME|SCHEMA_ID")
    preview.add_argument(
        "--trace", action="store_true", help="add _entry: the entry that last wrote each row"
    )
    preview.set_defaults(run=run_preview)


def run_preview(args: argparse.Namespace) -> int:
    from p2panda_assets.coordination import resolve_schema_id  # imports psycopg: only here

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
    names = {schema_id: history.name for schema_id, history in corpus.histories.items()}
    schema_id = resolve_schema_id(args.schema, names, "is in the input")
    table = corpus.tables.get(schema_id)
    if table is None:
        why = corpus.pending.get(schema_id)
        if why is not None:
            raise P2pandaError(why.reason, why.message)
        raise P2pandaError(Reason.AWAITING_SCHEMA, f"no schema {schema_id} in the input")
    for row in table.rows:
        print(json.dumps(row_json(table, row, args.trace), ensure_ascii=False))
    return 0
