"""Entry point of `panda`: parse arguments, dispatch, keep the libraries' output off
stderr (`cli/quiet.py`), and turn errors into one `error: <reason-code>: <message>` line
on stderr with exit code 1 (an unexpected exception: `error: internal: ...`)."""

from __future__ import annotations

import argparse
import os
import select
import sys
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from p2panda_assets.cli import (
    api_role_cmd,
    check_cmd,
    demo_cmd,
    doctor_cmd,
    entry_cmd,
    key_cmd,
    materialize_cmd,
    preview_cmd,
    publish_cmd,
    schema_cmd,
    server_cmd,
    store_cmd,
    unregister_cmd,
)
from p2panda_assets.cli.quiet import quiet_output, verbose_output
from p2panda_assets.errors import P2pandaError, Reason

EXIT_ERROR = 1
EXIT_INTERRUPTED = 130  # as a shell reports a command stopped by Ctrl-C
EXIT_STDOUT_CLOSED = 141  # as a shell reports a command stopped by SIGPIPE
MAX_INTERNAL_MESSAGE = 400  # characters of an unexpected exception's message, on one line

DESCRIPTION = """\
panda keeps p2panda data in PostgreSQL: signed, append-only bamboo logs of schemas and
their instances become one table per schema, and stay right while the schemas evolve
(migrations, reverts, relations and deletions). Authors create a key, write schemas and
publish instances as entry files; a server ingests those files, registers the schemas
it wants, and materializes their tables (through Dagster and Spark); applications read
the tables or views and ask `panda check` whether the version they expect is there.

Without P2PANDA_DATABASE_URL the data goes to a PostgreSQL server that panda starts
under $P2PANDA_HOME and leaves running (`panda server stop` stops it). Try `panda demo`."""

EPILOG = """\
environment:
  P2PANDA_HOME          local state: key, authoring state, embedded server (default .p2panda)
  P2PANDA_DATABASE_URL  an external PostgreSQL to use instead of the embedded one
  DAGSTER_HOME          Dagster's home (default $P2PANDA_HOME/dagster)
  SPARK_MASTER          where Spark runs (default local[*])

Errors are one line on stderr, `error: <reason-code>: <message>`, with exit code 1
(`panda check` and `panda server status` exit 3 for "no"). Run `panda COMMAND --help` for
a command's arguments."""

COMMANDS = (
    key_cmd,
    schema_cmd,
    publish_cmd,
    preview_cmd,
    store_cmd,
    unregister_cmd,
    materialize_cmd,
    check_cmd,
    entry_cmd,
    server_cmd,
    api_role_cmd,
    doctor_cmd,
    demo_cmd,
)


@dataclass(frozen=True, slots=True)
class Options:
    verbose: bool
    debug: bool


_active: list[Options] = []  # the commands running in this process (`demo` runs others)


class PandaParser(argparse.ArgumentParser):
    """argparse's parser, whose usage errors (a missing or unknown argument) are one
    `error: bad-usage: ...` line like every other error: argparse would print its usage
    and exit 2. Subcommands' parsers are of this class too (argparse makes them so).
    No flag is taken by a prefix (`--verbos` for `--verbose`): a typo is an error, and a
    flag added later cannot change what an abbreviation meant (issue 56)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **{**kwargs, "allow_abbrev": False})

    def error(self, message: str) -> NoReturn:
        raise P2pandaError(Reason.BAD_USAGE, f"{self.prog}: {message} (--help lists the arguments)")


def build_parser() -> argparse.ArgumentParser:
    parser = PandaParser(
        prog="panda",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_global_flags(parser, default=False)
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMANDS:
        module.register(subparsers)
    for command in _subcommands(parser):
        # Also after the command's name (`panda materialize --verbose`); absent there,
        # they leave the value given before it alone.
        _add_global_flags(command, default=argparse.SUPPRESS)
    return parser


def _add_global_flags(parser: argparse.ArgumentParser, default: object) -> None:
    parser.add_argument(
        "--verbose",
        action="store_true",
        default=default,
        help="show what the libraries print (Spark, Dagster, warnings)",
    )
    parser.add_argument(
        "--debug",
        action="store_true",
        default=default,
        help="show the traceback of an error (implies --verbose)",
    )


def _subcommands(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """Every parser below `parser`, at any depth (`panda key new`, `panda server stop`)."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):  # aliases map to one parser
                found += [child, *_subcommands(child)]
    return found


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except P2pandaError as error:
        print(f"error: {error.reason}: {error.message}", file=sys.stderr)
        return EXIT_ERROR
    # A command another one runs (as `demo` does) keeps the outer command's flags.
    outer = _active[-1] if _active else Options(verbose=False, debug=False)
    debug = args.debug or outer.debug
    options = Options(verbose=args.verbose or outer.verbose or debug, debug=debug)
    _active.append(options)
    try:
        with verbose_output() if options.verbose else quiet_output():
            return _run(args, options)
    finally:
        _active.pop()


def _run(args: argparse.Namespace, options: Options) -> int:
    try:
        code = args.run(args)
        sys.stdout.flush()  # here, where a reader gone is caught, not at the exit
        return code
    except BrokenPipeError as error:
        if not stdout_closed():
            return _run_failed(error, options)
        return EXIT_STDOUT_CLOSED
    except P2pandaError as error:
        if options.debug:
            traceback.print_exc()
        print(f"error: {error.reason}: {error.message}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        if options.debug:
            raise
        return EXIT_INTERRUPTED
    except Exception as error:
        return _run_failed(error, options)


def _run_failed(error: Exception, options: Options) -> int:
    if options.debug:
        traceback.print_exc()
    hint = "" if options.debug else " (--debug shows the traceback)"
    print(f"error: {Reason.INTERNAL}: {internal_message(error)}{hint}", file=sys.stderr)
    return EXIT_ERROR


def stdout_closed() -> bool:
    """Whether the reader of stdout is gone (`panda status | head -1`): then the command
    ends quietly, as a shell's tools do. What it still had to write goes to /dev/null,
    so that the flush at exit does not fail again; a broken pipe that is not stdout's
    (a socket) is an error like any other."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # not a file (a test's capture)
        return False
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    if not any(events & select.POLLERR for _, events in poller.poll(0)):
        return False
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)
    return True


def internal_message(error: BaseException) -> str:
    """An unexpected exception on one line: its type (unless a plain RuntimeError, whose
    message is written to be read) and its message without the lines of a stack trace
    (a Java exception carries its own), shortened to `MAX_INTERNAL_MESSAGE`."""
    lines = (line.strip() for line in str(error).splitlines())
    text = " ".join(line for line in lines if line and not _is_stack_line(line))
    name = type(error).__name__
    if not text:
        text = name
    elif type(error) not in (RuntimeError, Exception):
        text = f"{name}: {text}"
    if len(text) > MAX_INTERNAL_MESSAGE:
        text = text[: MAX_INTERNAL_MESSAGE - 1] + "…"
    return text


def _is_stack_line(line: str) -> bool:
    """`at org.apache...(File.java:12)` and `... 12 more` of a Java stack trace."""
    return line.startswith("at ") or (line.startswith("... ") and line.endswith(" more"))


if __name__ == "__main__":
    sys.exit(main())
