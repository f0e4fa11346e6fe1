"""`panda server start|stop|status`: the embedded PostgreSQL under `$P2PANDA_HOME`.

The server starts by itself when a command needs the database and keeps running after
it (so later commands, Spark and Dagster reuse it); these commands start it ahead of
time, stop it cleanly (a fast shutdown: open sessions are rolled back, a checkpoint is
written) and say whether it runs. `status` exits 0 when it runs and 3 when it does not,
as `pg_ctl status` and `panda check` do. With `P2PANDA_DATABASE_URL` set the product
uses that server instead, and the commands say so.

The embedded server's URL carries its password (every connection needs it, issue 49):
`start` and `status` print it whole, for the operator who runs `dagster dev` or psql by
hand; an external server's password is never shown.
"""

from __future__ import annotations

import argparse
import os
import re
from urllib.parse import urlsplit, urlunsplit

from p2panda_assets.errors import P2pandaError, Reason

EXIT_NOT_RUNNING = 3


def register(subparsers: argparse._SubParsersAction) -> None:
    server = subparsers.add_parser("server", help="start, stop or inspect the embedded PostgreSQL")
    actions = server.add_subparsers(dest="server_action", required=True, metavar="ACTION")
    for name, run, help_text in (
        ("start", run_start, "start the embedded server (if it is not running)"),
        ("stop", run_stop, "stop the embedded server cleanly"),
        ("status", run_status, "does it run? its port, data directory and URL (exit 3: no)"),
    ):
        actions.add_parser(name, help=help_text).set_defaults(run=run)


def run_start(args: argparse.Namespace) -> int:
    from p2panda_assets.store.embedded import EmbeddedError, embedded_status, ensure_embedded

    external = _external_url()
    if external is not None:
        print(f"{_external_line(external)}: the embedded server is not started")
        return 0
    was_running = embedded_status().running
    try:
        url = ensure_embedded()
    except EmbeddedError as error:
        raise P2pandaError(Reason.DATABASE_UNAVAILABLE, f"embedded PostgreSQL: {error}") from None
    print(f"{'already running' if was_running else 'started'}: {url}")
    return 0


def run_stop(args: argparse.Namespace) -> int:
    from p2panda_assets.store.embedded import EmbeddedError, layout, stop_embedded

    external = _external_url()
    if external is not None:
        print(_external_line(external))
    try:
        stopped = stop_embedded()
    except EmbeddedError as error:
        raise P2pandaError(Reason.DATABASE_UNAVAILABLE, f"embedded PostgreSQL: {error}") from None
    data = layout().data
    print(f"stopped: {data}" if stopped else f"not running: {data}")
    return 0


def run_status(args: argparse.Namespace) -> int:
    from p2panda_assets.store.embedded import embedded_status, layout

    external = _external_url()
    status = embedded_status()
    if external is not None:
        print(_external_line(external))
        state = "running, not used" if status.running else "not used"
        print(f"embedded server: {state} ({status.data})")
        return 0
    print(f"embedded server: {'running' if status.running else 'not running'}")
    if status.running:
        print(f"pid: {status.pid}")
        print(f"port: {status.port}")
    else:
        remembered = "-" if status.port is None else f"{status.port} (tried first at a start)"
        print(f"port: {remembered}")
    created = "" if status.data.exists() else " (not created yet)"
    print(f"data directory: {status.data}{created}")
    print(f"url: {status.url or '-'}")  # with the password: what an operator connects with
    password_file = layout().password_file
    kept = "" if password_file.exists() else " (not created yet)"
    print(f"password file: {password_file}{kept}")
    print(f"log: {status.log}")
    return 0 if status.running else EXIT_NOT_RUNNING


def _external_url() -> str | None:
    from p2panda_assets.store.database import DATABASE_URL_ENV

    return os.environ.get(DATABASE_URL_ENV, "").strip() or None


def _external_line(url: str) -> str:
    return f"external server in use: P2PANDA_DATABASE_URL={redacted(url)}"


def redacted(url: str) -> str:
    """`url` without its password (in a URL's user info or query, or a conninfo's)."""
    url = re.sub(r"(password=)('[^']*'|[^&\s]*)", r"\1***", url)
    if "://" not in url:
        return url
    parts = urlsplit(url)
    if parts.password is None:
        return url
    userinfo, _, host = parts.netloc.rpartition("@")
    user = userinfo.split(":", 1)[0]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))
