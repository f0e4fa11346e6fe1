"""`panda schema NAME init|migrate|revert`: author a schema on an own log (rule P-DEFINITION).

`panda schema init --file comment-001.toml` (no NAME) takes the name from the file's
`meta.name`, as `resources/` shows it. `panda schema NAME migrate --check FILE [--entries
FILE...]` says whether the migration is safe or lossy before anything is published.

`migrate` and `revert` print their class and, against the store's entries, what they do
to its data before they publish; a revert that changes nothing needs `--force`, and one
that rejects rows needs `--yes` (a terminal is asked instead).
"""

from __future__ import annotations

import argparse
import sys

from p2panda_assets.authoring.definitions import Definition, load_definition
from p2panda_assets.authoring.publish import finish, session
from p2panda_assets.authoring.schema_ops import (
    ChangePreview,
    StoreView,
    check_migration,
    init_schema,
    migrate_schema,
    revert_schema,
)
from p2panda_assets.engine.compatibility import Kind
from p2panda_assets.errors import P2pandaError, Reason

OUT_HELP = "append the entries to FILE (JSON lines) instead of printing them"
CHECK_HELP = "publish nothing: print whether the migration is safe or lossy, and why"
ENTRIES_HELP = (
    "with --check: JSON-lines files of the entries published so far (with the schema log);"
    " also count the values that would fall back"
)
YES_HELP = "publish even if instances would be rejected (else a terminal is asked)"
FORCE_HELP = "publish a revert that changes nothing"


def register(subparsers: argparse._SubParsersAction) -> None:
    schema = subparsers.add_parser("schema", help="author a schema: init, migrate, revert")
    schema.add_argument("name", nargs="?", metavar="NAME", help="the schema's local name")
    actions = schema.add_subparsers(dest="schema_action", required=True, metavar="ACTION")

    init = actions.add_parser("init", help="start a new schema log with a schema-meta")
    init.add_argument("--description", help="the schema's description")
    init.add_argument("--file", metavar="DEF", help="a definition file (.yaml or .toml)")
    init.add_argument("--out", metavar="FILE", help=OUT_HELP)
    init.set_defaults(run=run_init)

    migrate = actions.add_parser("migrate", help="publish the field changes of a file")
    migrate.add_argument("file", metavar="DEF", help="a definition file (.yaml or .toml)")
    migrate.add_argument("--out", metavar="FILE", help=OUT_HELP)
    migrate.add_argument("--check", action="store_true", help=CHECK_HELP)
    migrate.add_argument(
        "--entries", action="extend", nargs="+", default=[], metavar="FILE", help=ENTRIES_HELP
    )
    migrate.add_argument("--yes", action="store_true", help=YES_HELP)
    migrate.set_defaults(run=run_migrate)

    revert = actions.add_parser("revert", help="restore the state of an earlier version")
    revert.add_argument("--target", type=int, required=True, metavar="N")
    revert.add_argument("--out", metavar="FILE", help=OUT_HELP)
    revert.add_argument("--yes", action="store_true", help=YES_HELP)
    revert.add_argument("--force", action="store_true", help=FORCE_HELP)
    revert.set_defaults(run=run_revert)


def run_init(args: argparse.Namespace) -> int:
    definition = load_definition(args.file) if args.file else None
    with session() as current:
        outcome = init_schema(
            current, args.name, description=args.description, definition=definition
        )
        return finish(current, args.out, outcome.result, outcome.notes)


def run_migrate(args: argparse.Namespace) -> int:
    name = _name(args)
    definition = load_definition(args.file)
    if args.check:
        return _check(args, name, definition)
    if args.entries:
        raise P2pandaError(Reason.BAD_INPUT, "--entries goes with --check (nothing to count)")
    store = stored_entries()
    with session() as current:
        outcome = migrate_schema(current, name, definition, store)
        if outcome.preview is not None:
            confirm(outcome.preview, yes=args.yes, force=False)
        return finish(current, args.out, outcome.result, outcome.notes)


def _check(args: argparse.Namespace, name: str, definition: Definition) -> int:
    """`migrate --check`: the report on stdout, notes on stderr; no commit, so neither
    the authoring state nor an `--out` file changes."""
    with session() as current:
        check = check_migration(current, name, definition, args.entries)
    if args.out is not None:
        check.notes.append(f"note: --check leaves {args.out} as it is")
    for note in check.notes:
        print(note, file=sys.stderr)
    for line in check.lines():
        print(line)
    return 0


def run_revert(args: argparse.Namespace) -> int:
    name = _name(args)
    store = stored_entries()
    with session() as current:
        outcome = revert_schema(current, name, args.target, store)
        if outcome.preview is not None:
            confirm(outcome.preview, yes=args.yes, force=args.force)
        return finish(current, args.out, outcome.result, outcome.notes)


def confirm(preview: ChangePreview, *, yes: bool, force: bool) -> None:
    """Say what publishing would do, then refuse (nothing is committed yet) what changes
    nothing without `--force`, and what rejects rows without `--yes`: a terminal is
    asked y/N; without one the refusal says how many and how to confirm."""
    for line in preview.lines():
        print(line, file=sys.stderr)
    if preview.kind is Kind.NO_OP and not force:
        raise P2pandaError(
            Reason.NO_CHANGE,
            f"{preview.what} changes nothing; nothing was published (--force publishes it)",
        )
    if not preview.needs_yes or yes:
        return
    if sys.stdin.isatty() and sys.stderr.isatty():
        print("publish it? [y/N] ", end="", file=sys.stderr, flush=True)
        if sys.stdin.readline().strip().lower() in ("y", "yes"):
            return
    raise P2pandaError(Reason.UNCONFIRMED, f"{_rejects(preview)}; nothing was published")


def _rejects(preview: ChangePreview) -> str:
    """What a refusal for want of `--yes` says is at stake."""
    effect = preview.effect
    if effect is not None:
        at_stake = f"would reject {effect.rejects} of {effect.instances} instances"
    else:
        dead = ", ".join(str(v) for v in preview.killed)
        at_stake = f"would reject every create and update written at version {dead}"
    return f"{preview.what} {at_stake}: pass --yes to publish it"


def stored_entries() -> StoreView:
    """The store's entries, if a store is reachable: P2PANDA_DATABASE_URL's, or the
    embedded server under $P2PANDA_HOME (started, as other commands do, if it has a data
    directory: a home that never had a store is not given one just to count nothing)."""
    import psycopg  # only here: the other schema commands start without it

    from p2panda_assets.store.database import connect, external_url
    from p2panda_assets.store.embedded import layout
    from p2panda_assets.store.stored_entries import stored_pairs

    if external_url() is None and not layout().data.exists():
        return StoreView(
            None, "no store here (no P2PANDA_DATABASE_URL, no embedded server): no counts"
        )
    try:
        with connect() as conn:
            return StoreView(stored_pairs(conn))
    except (P2pandaError, psycopg.Error) as error:
        return StoreView(None, f"the store is not reachable ({_one_line(error)}): no counts")


def _one_line(error: Exception) -> str:
    return " ".join(str(error).split())[:200]


def _name(args: argparse.Namespace) -> str:
    if args.name is None:
        raise P2pandaError(
            Reason.BAD_NAME, f"name the schema: `panda schema NAME {args.schema_action} ...`"
        )
    return args.name
