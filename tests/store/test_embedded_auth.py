"""Issue 49: the embedded server lets nobody in without its password. It was created with
`initdb --auth=trust` on 127.0.0.1 and a Unix socket, so any local user could connect as
the superuser. Now every line of pg_hba.conf says `scram-sha-256`, the password is made at
initdb and kept in a 0600 file of its own, and a home made by the old code is upgraded in
place at its next start, keeping its data."""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from p2panda_assets.home import ensure_home
from p2panda_assets.store import embedded
from p2panda_assets.store.database import jdbc_options
from p2panda_assets.store.embedded import (
    DATABASE_USER,
    embedded_status,
    ensure_embedded,
    layout,
    read_password,
    refuses_without_password,
    stop_embedded,
)
from tests.postgres import embedded_home
from tests.store.test_home_permissions import NORMAL_USER, run_as

pytestmark = pytest.mark.postgres

KEPT = "written while the server trusted everyone"


@pytest.fixture
def home() -> Iterator[Path]:
    for directory in embedded_home():
        yield directory / "home"


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1].split("/")[0])


def socket_dir(url: str) -> str:
    """The directory of the server's Unix socket, as the server says."""
    with psycopg.connect(url) as conn:
        return conn.execute("SHOW unix_socket_directories").fetchone()[0]


def trusting_lines(home: Path) -> list[str]:
    """pg_hba.conf's rules whose method is `trust`."""
    text = layout(home).hba_file.read_text()
    rules = (line.split("#", 1)[0].split() for line in text.splitlines())
    return [" ".join(rule) for rule in rules if rule and "trust" in rule]


def methods(home: Path) -> set[str]:
    """The methods of pg_hba.conf's rules (the last field: no rule here has options)."""
    text = layout(home).hba_file.read_text()
    rules = (line.split("#", 1)[0].split() for line in text.splitlines())
    return {rule[-1] for rule in rules if rule}


def assert_password_file(home: Path) -> str:
    """The password file: 0600, the caller's, and what the URL carries; its password."""
    info = layout(home).password_file.stat()
    assert stat.S_IMODE(info.st_mode) == 0o600
    assert info.st_uid == os.geteuid()
    password = read_password(layout(home))
    assert password is not None and len(password) >= 40
    return password


def test_a_new_server_demands_its_password_over_tcp_and_the_socket(home: Path) -> None:
    url = ensure_embedded(home)
    password = assert_password_file(home)
    port = port_of(url)
    assert url == f"postgresql://{DATABASE_USER}:{password}@127.0.0.1:{port}/postgres"
    assert methods(home) == {"scram-sha-256"}
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT current_user").fetchone() == (DATABASE_USER,)
        stored = conn.execute(
            "SELECT rolpassword FROM pg_authid WHERE rolname = current_user"
        ).fetchone()[0]
    assert stored.startswith("SCRAM-SHA-256$")
    assert refuses_without_password(port)
    assert refuses_without_password(port, socket_dir(url))
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(url.replace(password, "wrong"), connect_timeout=5)
    # Every way the product connects takes its password from that URL: Spark's JDBC
    # options, `panda server status`, and a second start.
    assert jdbc_options(url)["password"] == password
    assert embedded_status(home).url == url
    assert ensure_embedded(home) == url
    stop_embedded(home)
    assert ensure_embedded(home) == url  # the same password after a restart
    assert not (layout(home).run / "initdb-password").exists()


def psql_as(user: pwd.struct_passwd, url: str, host: str, password: str | None) -> str:
    """`psql -w` run by `user` against the server of `url` on `host` (an address or the
    socket's directory), with `password` or none; its output, or the error it printed."""
    env = {"PATH": "/usr/bin:/bin", "PGCONNECT_TIMEOUT": "5", "PGPASSFILE": "/dev/null/none"}
    if password is not None:
        env["PGPASSWORD"] = password
    command = [str(embedded.bin_path() / "psql"), "-w", "-h", host, "-p", str(port_of(url))]
    command += ["-U", DATABASE_USER, "-d", "postgres", "-tAc", "SELECT current_user"]
    result = subprocess.run(
        command,
        capture_output=True,
        text=True,
        env=env,
        cwd="/",
        user=user.pw_uid,
        group=user.pw_gid,
        extra_groups=[],
        timeout=30,
        check=False,
    )
    return (result.stdout + result.stderr).strip()


@pytest.mark.skipif(os.geteuid() != 0, reason="switching to another local user needs root")
def test_another_local_user_is_refused_without_the_password(home: Path) -> None:
    """What the issue is about: any local user could log in as the superuser. `nobody`
    reaches the socket and the port, and gets in only with the password."""
    url = ensure_embedded(home)
    password = assert_password_file(home)
    other = pwd.getpwnam(NORMAL_USER)
    for host in ("127.0.0.1", socket_dir(url)):
        refused = psql_as(other, url, host, None)
        assert "no password supplied" in refused, (host, refused)
        wrong = psql_as(other, url, host, "wrong")
        assert "password authentication failed" in wrong, (host, wrong)
        assert psql_as(other, url, host, password) == DATABASE_USER, host


def serve_as_owner(home: str) -> dict:
    """In a process of a normal user: start the server (it runs as that user), and what
    a connection with and without the password gets; the server is stopped again."""
    url = ensure_embedded(Path(home))
    try:
        where = layout(Path(home))
        info = where.password_file.stat()
        with psycopg.connect(url) as conn:
            user = conn.execute("SELECT current_user").fetchone()[0]
        return {
            "user": user,
            "refused_tcp": refuses_without_password(port_of(url)),
            "refused_socket": refuses_without_password(port_of(url), socket_dir(url)),
            "mode": stat.S_IMODE(info.st_mode),
            "owner": info.st_uid,
            "url_has_password": f":{read_password(where)}@" in url,
        }
    finally:
        stop_embedded(Path(home))


def test_a_server_run_by_a_normal_user_demands_its_password_too() -> None:
    """Not root: the server runs as the caller itself (as root, a forked child becomes
    `nobody`), and its password file is that user's."""
    scratch = Path(tempfile.mkdtemp(prefix="p2panda-test-auth-"))
    home = scratch / "home"
    try:
        if os.geteuid() == 0:
            user = pwd.getpwnam(NORMAL_USER)
            os.chown(scratch, user.pw_uid, user.pw_gid)
            facts, uid = run_as(user, serve_as_owner, str(home)), user.pw_uid
        else:
            facts, uid = serve_as_owner(str(home)), os.geteuid()
        assert facts == {
            "user": DATABASE_USER,
            "refused_tcp": True,
            "refused_socket": True,
            "mode": 0o600,
            "owner": uid,
            "url_has_password": True,
        }
    finally:
        pid = embedded_status(home).pid
        if pid is not None:  # the child could not stop it
            os.kill(pid, signal.SIGINT)
        shutil.rmtree(scratch, ignore_errors=True)


def old_trust_home(home: Path) -> str:
    """A home as the code before issue 49 left it: initdb with `--auth=trust`, no password
    file, the server running with a table of data; the URL without password."""
    where = layout(home)
    ensure_home(home)
    where.run.mkdir(parents=True)
    where.data.mkdir(mode=0o700)
    user = embedded._server_user()
    if user is not None:
        embedded._make_traversable(where.root, user)
        embedded._make_binaries_usable(user)
        for directory in (where.run, where.data):
            os.chown(directory, user.pw_uid, user.pw_gid)
    initdb = [str(embedded.bin_path() / "initdb"), "-D", str(where.data), "--auth=trust"]
    initdb += ["-U", DATABASE_USER, "-E", "UTF8", "--locale=C"]
    embedded._run(initdb, user, cwd=where.root)
    url = f"postgresql://{DATABASE_USER}@127.0.0.1:{embedded._start(where, user)}/postgres"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE kept (note text)")
        conn.execute("INSERT INTO kept VALUES (%s)", (KEPT,))
    assert not refuses_without_password(port_of(url))  # anyone gets in
    assert trusting_lines(home) and read_password(where) is None
    return url


@pytest.mark.parametrize("running", [True, False], ids=["running", "stopped"])
def test_a_trust_home_is_upgraded_in_place_at_its_next_start(home: Path, running: bool) -> None:
    """Left running by the old code (the next command upgrades it with a reload, the same
    postmaster keeps serving) or stopped (upgraded right after it starts)."""
    old_url = old_trust_home(home)
    pid = embedded_status(home).pid
    if not running:
        stop_embedded(home)

    url = ensure_embedded(home)

    password = assert_password_file(home)
    assert url == old_url.replace(f"{DATABASE_USER}@", f"{DATABASE_USER}:{password}@")
    assert trusting_lines(home) == []
    assert methods(home) == {"scram-sha-256"}
    assert refuses_without_password(port_of(url))
    assert refuses_without_password(port_of(url), socket_dir(url))
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT note FROM kept").fetchall() == [(KEPT,)]
    assert (embedded_status(home).pid == pid) is running
    # Upgraded once: later starts find the password and use it.
    assert ensure_embedded(home) == url
    stop_embedded(home)
    assert ensure_embedded(home) == url
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT note FROM kept").fetchall() == [(KEPT,)]
