"""`panda api-role NAME [--rotate]`: a login role for applications (PostgREST,
PostGraphile, an app) that can SELECT the views of `p2panda_api`, those there are and
those materializations create later, and nothing else (`store/api_role.py`).

The role's password is kept in `$P2PANDA_HOME/api-roles/NAME` (0600): running the
command again sets that same password again and prints the same URL, so a deployment can
run it at every start; `--rotate` makes a new one (the old one stops working). The last
line of the output is the role's connection URL, password included.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from p2panda_assets.errors import P2pandaError, Reason
from p2panda_assets.home import ensure_home, p2panda_home, write_private_file

ROLES_DIR = "api-roles"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "api-role",
        help="a login role that reads the p2panda_api views only; prints its URL",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("name", metavar="NAME", help="the role's name (lower-case, a-z0-9_)")
    parser.add_argument(
        "--rotate", action="store_true", help="a new password (the old one stops working)"
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from p2panda_assets.store.api_role import api_role_url, check_role_name, ensure_api_role
    from p2panda_assets.store.database import connect, database_url, ensure_schema
    from p2panda_assets.store.passwords import new_password

    check_role_name(args.name)  # before the name becomes a file name
    path = password_path(args.name)
    kept = None if args.rotate else read_role_password(path)
    password = kept or new_password()
    url = database_url()
    with connect(url, autocommit=True) as conn:
        ensure_schema(conn)  # p2panda_api exists from here on
        created = ensure_api_role(conn, args.name, password)
        role_url = api_role_url(conn, url, args.name, password)
    if kept is None:
        save_role_password(path, password)
    state = "created" if created else "updated"
    how = "kept" if kept else "new"
    print(f"{state} role {args.name}: SELECT on the views of p2panda_api, now and later")
    print(f"password: {how}, in {path}")
    print(role_url)
    return 0


def password_path(name: str) -> Path:
    """Where the role's password is kept: one file per role, so each can be read alone."""
    return p2panda_home() / ROLES_DIR / name


def read_role_password(path: Path) -> str | None:
    """The kept password of a role; None if there is none."""
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        return None
    except OSError as error:
        raise P2pandaError(Reason.UNREADABLE_FILE, f"{path}: {error.strerror}") from None
    return text or None


def save_role_password(path: Path, password: str) -> None:
    """Keep `password` in `path`, owner-only, renamed into place whole."""
    try:
        ensure_home(path.parent.parent)  # the home first: owner-only, if it is new
        ensure_home(path.parent)
        fresh = path.with_name(f".{path.name}.new")
        write_private_file(fresh, password + "\n")
        os.replace(fresh, path)
    except OSError as error:
        raise P2pandaError(Reason.UNWRITABLE_FILE, f"{path}: {error.strerror}") from None
