"""The embedded PostgreSQL: used when `P2PANDA_DATABASE_URL` is unset.

It runs the PostgreSQL 16 binaries shipped in the `pgserver` wheel, but not pgserver's
own server object: that one listens on a Unix socket only, and Spark's JDBC driver needs
TCP. The server listens on 127.0.0.1 at a port chosen at first start and remembered in
`$P2PANDA_HOME/postgres/port`, and it keeps running after the command that started it,
so later commands, Dagster and Spark all reuse it. A file lock makes concurrent starts
safe. PostgreSQL refuses to run as root: then the server runs as a dedicated system user.

Every connection, over TCP or the Unix socket, must give the password of the database
user (`scram-sha-256` in pg_hba.conf): without it, any local user could connect as the
superuser. The password is generated at initdb and kept in `$P2PANDA_HOME/postgres/password`
(0600, the caller's; as root, root's, which the server's user cannot read: it never needs
to), and the URL `ensure_embedded` returns carries it, so psycopg, Dagster's storage and
Spark's JDBC reads (`database.jdbc_options`) all use it. A data dir made before (initdb
`--auth=trust`) is upgraded in place at its next start: the password is set while trust
still lets us in, then pg_hba.conf is rewritten and reloaded.

Layout under `$P2PANDA_HOME/postgres/`: `data/` (PGDATA), `run/` (socket and log, owned
by the server's user), `port`, `password`, `lock`.
"""

from __future__ import annotations

import fcntl
import importlib.util
import os
import pwd
import re
import shlex
import socket
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import psycopg
from psycopg import sql

from p2panda_assets.home import ensure_home, p2panda_home, write_private_file
from p2panda_assets.store.passwords import new_password, password_verifier

SYSTEM_USER = "p2panda-pg"  # runs the server when we are root
DATABASE_USER = "postgres"
DATABASE_NAME = "postgres"
HOST = "127.0.0.1"
START_TIMEOUT = 60  # seconds pg_ctl waits for the server to accept connections
START_ATTEMPTS = 3  # a free port can be taken between choosing it and binding it
MAX_SOCKET_PATH = 100  # sun_path holds 108 bytes; ".s.PGSQL.65535.lock" must fit
AUTH_METHOD = "scram-sha-256"  # pg_hba.conf's method for every line, local and host
RELOAD_TIMEOUT = 10.0  # seconds for a reloaded pg_hba.conf to refuse a password-less login


class EmbeddedError(RuntimeError):
    """The embedded server could not be started or stopped (the log says why)."""


@dataclass(frozen=True, slots=True)
class Layout:
    """Where the embedded server keeps everything, for one `$P2PANDA_HOME`."""

    root: Path

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def run(self) -> Path:
        return self.root / "run"

    @property
    def log(self) -> Path:
        return self.run / "postgres.log"

    @property
    def port_file(self) -> Path:
        return self.root / "port"

    @property
    def lock_file(self) -> Path:
        return self.root / "lock"

    @property
    def password_file(self) -> Path:
        return self.root / "password"

    @property
    def hba_file(self) -> Path:
        return self.data / "pg_hba.conf"


def layout(home: Path | None = None) -> Layout:
    return Layout((home or p2panda_home()).resolve() / "postgres")


def url_for_port(port: int, password: str | None = None) -> str:
    """The server's URL; with the password (percent-encoded) when one is known."""
    user = DATABASE_USER if password is None else f"{DATABASE_USER}:{quote(password, safe='')}"
    return f"postgresql://{user}@{HOST}:{port}/{DATABASE_NAME}"


def read_password(where: Layout) -> str | None:
    """The database user's password from its file; None if there is none (yet)."""
    try:
        text = where.password_file.read_text().strip()
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return None
    return text or None


def ensure_embedded(home: Path | None = None) -> str:
    """The URL of the embedded server under `home`, starting it first if it is not up."""
    where = layout(home)
    ensure_home(where.root.parent)  # owner-only if new: as root, `_prepare` opens a way
    where.root.mkdir(exist_ok=True)
    with _locked(where):
        port = running_port(where)
        user = _server_user()
        if port is not None:
            if user is not None:
                # A running server reopens files by their absolute paths (pg_control at
                # every checkpoint): keep the way to its data dir open, should anything
                # have closed it since it started.
                _make_traversable(where.data, user)
        else:
            _prepare(where, user)
            port = _start(where, user)
        if _trusting(where):
            _require_password(where, user, port)
        return url_for_port(port, read_password(where))


def stop_embedded(home: Path | None = None) -> bool:
    """Stop the embedded server under `home`; False if none was running."""
    where = layout(home)
    if not where.data.exists():
        return False
    where.root.mkdir(parents=True, exist_ok=True)
    with _locked(where):
        pid = _postmaster_pid(where)
        if pid is None or not _pid_alive(pid) or not _is_our_postmaster(pid, where):
            return False  # not running (a pid file a crash left behind is no server)
        user = _server_user()
        if user is not None:
            _make_traversable(where.data, user)
        _pg_ctl(user, ["-D", str(where.data), "-w", "-t", str(START_TIMEOUT), "-m", "fast", "stop"])
        return True


@dataclass(frozen=True, slots=True)
class ServerStatus:
    """Where the embedded server under one `$P2PANDA_HOME` stands."""

    running: bool
    pid: int | None  # the postmaster's, while it runs
    port: int | None  # the port it listens on; stopped: the one it will try first
    data: Path
    log: Path
    password: str | None = None  # from the password file, if it could be read

    @property
    def url(self) -> str | None:
        """The URL to connect with (password included), while the server runs."""
        if not self.running or self.port is None:
            return None
        return url_for_port(self.port, self.password)


def embedded_status(home: Path | None = None) -> ServerStatus:
    """Is the embedded server under `home` up (and answering)? Starts and creates nothing."""
    where = layout(home)
    port = running_port(where)
    if port is not None:
        pid = _postmaster_pid(where)
        return ServerStatus(True, pid, port, where.data, where.log, read_password(where))
    return ServerStatus(False, None, _remembered_port(where), where.data, where.log)


# --- detecting a running server ----------------------------------------------------


def running_port(where: Layout) -> int | None:
    """The port of our server if it is up and answers; None otherwise.

    A postmaster.pid alone is not proof (it survives a crash, and its pid may belong to
    another process by now): the server must answer on its port and name our data dir.
    """
    info = _postmaster_info(where)
    if info is None or info.get("status") != "ready" or not info.get("port", "").isdigit():
        return None
    port = int(info["port"])
    return port if _answers_as(where, port) else None


def _postmaster_info(where: Layout) -> dict[str, str] | None:
    """postmaster.pid's lines: pid, data dir, start time, port, socket dir, host, shm, status."""
    try:
        lines = (where.data / "postmaster.pid").read_text().splitlines()
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return None
    keys = ("pid", "data", "start", "port", "socket", "host", "shm", "status")
    return {key: line.strip() for key, line in zip(keys, lines, strict=False)}


def _postmaster_pid(where: Layout) -> int | None:
    info = _postmaster_info(where)
    pid = (info or {}).get("pid", "")
    return int(pid) if pid.isdigit() else None


def _answers_as(where: Layout, port: int) -> bool:
    """Does the server on `port` answer, and is it the one serving our data dir?"""
    try:
        with _connect(where, port) as conn:
            row = conn.execute("SHOW data_directory").fetchone()
    except psycopg.Error:
        return False
    return row is not None and Path(row[0]).resolve() == where.data.resolve()


def _connect(where: Layout, port: int) -> psycopg.Connection:
    """A connection as the database user, with the password if one is known (a server
    that still trusts every connection ignores it)."""
    return psycopg.connect(
        host=HOST,
        port=port,
        user=DATABASE_USER,
        dbname=DATABASE_NAME,
        password=read_password(where),
        connect_timeout=5,
        autocommit=True,
    )


# --- preparing and starting --------------------------------------------------------


def _prepare(where: Layout, user: pwd.struct_passwd | None) -> None:
    """Create run/ and, once, the data dir; as root, hand both to the server's user."""
    where.run.mkdir(parents=True, exist_ok=True)
    if user is not None:
        _make_traversable(where.root, user)
        _make_binaries_usable(user)
        os.chown(where.run, user.pw_uid, user.pw_gid)
        if where.data.exists():
            _chown_tree(where.data, user)
    if not (where.data / "PG_VERSION").exists():
        _initdb(where, user)


def _initdb(where: Layout, user: pwd.struct_passwd | None) -> None:
    if where.data.exists() and any(where.data.iterdir()):
        raise EmbeddedError(f"{where.data} exists, is not empty and holds no database")
    where.data.mkdir(mode=0o700, exist_ok=True)
    if user is not None:
        os.chown(where.data, user.pw_uid, user.pw_gid)
    # initdb runs as the server's user, who cannot read the (root's) password file: it
    # gets a copy of its own in run/, removed as soon as initdb has read it.
    pwfile = where.run / "initdb-password"
    write_private_file(pwfile, _password(where) + "\n")
    if user is not None:
        os.chown(pwfile, user.pw_uid, user.pw_gid)
    command = [
        str(bin_path() / "initdb"),
        "-D",
        str(where.data),
        f"--auth={AUTH_METHOD}",
        f"--pwfile={pwfile}",
        "-U",
        DATABASE_USER,
        "-E",
        "UTF8",
        "--locale=C",  # no dependency on the host's installed locales
    ]
    try:
        _run(command, user, cwd=where.root)
    finally:
        pwfile.unlink(missing_ok=True)


def _password(where: Layout) -> str:
    """The database user's password: the one in its file, else a new one written there
    (0600, renamed into place so that a reader never sees half of it)."""
    known = read_password(where)
    if known is not None:
        return known
    password = new_password()
    fresh = where.password_file.with_name("password.new")
    write_private_file(fresh, password + "\n")
    os.replace(fresh, where.password_file)
    return password


# --- upgrading a data dir that trusts every connection ----------------------------

_CONNECTION_TYPES = ("local", "host", "hostssl", "hostnossl", "hostgssenc", "hostnogssenc")
_TRUST = re.compile(r"(?<=\s)trust(?=\s|$)")


def _hba_lines_trusting(text: str) -> list[int]:
    """The numbers of pg_hba.conf's lines whose method is `trust`."""
    found = []
    for number, line in enumerate(text.splitlines()):
        rule = line.split("#", 1)[0]
        fields = rule.split()
        if fields and fields[0] in _CONNECTION_TYPES and _TRUST.search(rule):
            found.append(number)
    return found


def _trusting(where: Layout) -> bool:
    """Does pg_hba.conf let any connection in without a password (made before issue 49)?"""
    try:
        return bool(_hba_lines_trusting(where.hba_file.read_text()))
    except OSError:
        return False  # not ours to read: nothing we could upgrade


def _require_password(where: Layout, user: pwd.struct_passwd | None, port: int) -> None:
    """Upgrade a running server that trusts every connection, in place, losing nothing:
    set the password while trust still lets us in, then demand it in pg_hba.conf and
    reload. The password file is written first, so that an upgrade cut short is
    finished by the next start with the same password."""
    password = _password(where)
    with _connect(where, port) as conn:
        verifier = password_verifier(conn, DATABASE_USER, password)
        conn.execute(
            sql.SQL("ALTER ROLE {} PASSWORD {}").format(
                sql.Identifier(DATABASE_USER), sql.Literal(verifier)
            )
        )
        _rewrite_hba(where, user)
        conn.execute("SELECT pg_reload_conf()")
    _wait_for_password_auth(where, port)


def _rewrite_hba(where: Layout, user: pwd.struct_passwd | None) -> None:
    """pg_hba.conf with `scram-sha-256` where it said `trust`, every other line kept;
    written beside it and renamed into place, owned by the server's user."""
    lines = where.hba_file.read_text().splitlines(keepends=True)
    for number in _hba_lines_trusting("".join(lines)):
        rule, hash_, comment = lines[number].partition("#")
        lines[number] = _TRUST.sub(AUTH_METHOD, rule) + hash_ + comment
    fresh = where.hba_file.with_name("pg_hba.conf.new")
    write_private_file(fresh, "".join(lines))
    if user is not None:
        os.chown(fresh, user.pw_uid, user.pw_gid)
    os.replace(fresh, where.hba_file)


def _wait_for_password_auth(where: Layout, port: int) -> None:
    """Return once the server refuses a login without the password (a reload is
    asynchronous: the postmaster rereads pg_hba.conf when it gets to the signal)."""
    deadline = time.monotonic() + RELOAD_TIMEOUT
    while time.monotonic() < deadline:
        if refuses_without_password(port):
            return
        time.sleep(0.1)
    raise EmbeddedError(
        f"{where.hba_file} demands a password, but the server still lets logins in without"
        f" one after a reload; see {where.log}"
    )


def refuses_without_password(port: int, host: str = HOST) -> bool:
    """Does the server on `port` refuse the database user a login without a password?
    (Neither PGPASSWORD nor a password file is looked at: `/dev/null/none` cannot exist,
    and libpq warns about /dev/null itself, which is no plain file.)"""
    try:
        with psycopg.connect(
            host=host,
            port=port,
            user=DATABASE_USER,
            dbname=DATABASE_NAME,
            password="",
            passfile=os.path.join(os.devnull, "none"),
            connect_timeout=5,
        ):
            return False
    except psycopg.OperationalError as error:
        return "password" in str(error)


# --- starting ----------------------------------------------------------------------


def _start(where: Layout, user: pwd.struct_passwd | None) -> int:
    """Start the server on the remembered port, or a new free one; return the port."""
    _remove_stale_pid_file(where)
    socket_dir = _socket_dir(where, user)
    for attempt in range(START_ATTEMPTS):
        port = _choose_port(where)
        options = f"-h {HOST} -p {port} -k {shlex.quote(str(socket_dir))}"
        command = ["-D", str(where.data), "-l", str(where.log), "-o", options]
        try:
            _pg_ctl(user, [*command, "-w", "-t", str(START_TIMEOUT), "start"], cwd=where.root)
        except EmbeddedError as error:
            if attempt + 1 == START_ATTEMPTS or _port_is_free(port):
                raise EmbeddedError(f"{error}\n{where.log}:\n{_log_tail(where)}") from None
            continue  # somebody took the port meanwhile: choose another
        if _answers_as(where, port):
            return port
        raise EmbeddedError(f"the server started but does not answer on port {port}")
    raise AssertionError("unreachable")


def _log_tail(where: Layout, lines: int = 20) -> str:
    try:
        return "\n".join(where.log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


# The ports a remembered port may be: not 0 (the kernel's pick, which the server refuses),
# not a privileged one (as root the probe binds it, the server's own user cannot), and
# not past 65535 (the probe raised OverflowError: every command failed as `internal`).
REMEMBERED_PORTS = range(1024, 65536)


def _remembered_port(where: Layout) -> int | None:
    """The port of the port file, unless it is not one the server can take."""
    try:
        port = int(where.port_file.read_text().strip())
    except (FileNotFoundError, NotADirectoryError, ValueError):
        return None
    return port if port in REMEMBERED_PORTS else None


def _choose_port(where: Layout) -> int:
    """The remembered port while it is free, else a new free one (then remembered)."""
    remembered = _remembered_port(where)
    if remembered is not None and _port_is_free(remembered):
        return remembered
    port = _free_port()
    where.port_file.write_text(f"{port}\n")
    return port


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        # PostgreSQL binds with SO_REUSEADDR too: TIME_WAIT leftovers do not block it.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((HOST, port))
        except OSError:
            return False
    return True


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((HOST, 0))
        return probe.getsockname()[1]


def _remove_stale_pid_file(where: Layout) -> None:
    """Drop a postmaster.pid left by a crash whose pid now names another process.

    PostgreSQL itself refuses to start while that pid is alive, and in containers pids
    are reused soon. A live postgres process serving our data dir is never touched.
    """
    pid = _postmaster_pid(where)
    if pid is None or not _pid_alive(pid):
        return  # absent, or dead: PostgreSQL handles a dead pid by itself
    if _is_our_postmaster(pid, where):
        raise EmbeddedError(
            f"a postgres process (pid {pid}) serves {where.data} but does not answer"
            f" (or refuses the password in {where.password_file}); see {where.log}"
        )
    (where.data / "postmaster.pid").unlink()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _is_our_postmaster(pid: int, where: Layout) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return True  # cannot tell: assume it is, and refuse rather than break a server
    names = {os.path.basename(part) for part in cmdline[:1]}
    return b"postgres" in names and os.fsencode(str(where.data)) in cmdline


def _socket_dir(where: Layout, user: pwd.struct_passwd | None) -> Path:
    """run/ unless its path is too long for a Unix socket; then a short dir in /tmp."""
    if len(os.fsencode(str(where.run))) <= MAX_SOCKET_PATH - len("/.s.PGSQL.65535.lock"):
        return where.run
    short = Path(tempfile.gettempdir()) / f"p2panda-pg-{os.stat(where.data).st_ino}"
    short.mkdir(mode=0o700, exist_ok=True)
    if user is not None:
        os.chown(short, user.pw_uid, user.pw_gid)
    return short


# --- running the binaries, as root or not --------------------------------------------


def bin_path() -> Path:
    """The PostgreSQL binaries inside the pgserver wheel.

    Found without importing pgserver, whose import sets up its own lock files and warns
    about XDG_RUNTIME_DIR; this is the same path as `pgserver._commands.POSTGRES_BIN_PATH`.
    """
    spec = importlib.util.find_spec("pgserver")
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedError("the pgserver package is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


def _pg_ctl(user: pwd.struct_passwd | None, args: list[str], cwd: Path | None = None) -> None:
    _run([str(bin_path() / "pg_ctl"), *args], user, cwd=cwd)


def _run(command: list[str], user: pwd.struct_passwd | None, cwd: Path | None = None) -> None:
    """Run a PostgreSQL binary (as `user` if given); its output goes into the error.

    Output goes to temporary files, not pipes: the postmaster pg_ctl starts would
    otherwise inherit a pipe and keep us waiting.
    """
    with tempfile.TemporaryFile() as output:
        result = subprocess.run(
            command,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            timeout=START_TIMEOUT + 30,
            check=False,
            # None (the defaults): run as ourselves
            user=None if user is None else user.pw_uid,
            group=None if user is None else user.pw_gid,
            extra_groups=None if user is None else [],
        )
        if result.returncode != 0:
            output.seek(0)
            text = output.read().decode(errors="replace").strip()
            name = Path(command[0]).name
            raise EmbeddedError(f"{name} failed ({result.returncode}): {text}")


def _server_user() -> pwd.struct_passwd | None:
    """The system user that runs the server: None (ourselves) unless we are root."""
    if os.geteuid() != 0:
        return None
    return _ensure_system_user(SYSTEM_USER)


def _ensure_system_user(name: str) -> pwd.struct_passwd:
    """The user `name`, created with useradd if missing (as pgserver does)."""
    try:
        return pwd.getpwnam(name)
    except KeyError:
        pass
    command = ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name]
    try:
        result = subprocess.run(command, capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise EmbeddedError(f"running as root needs a user {name!r}; useradd is missing") from None
    try:
        return pwd.getpwnam(name)  # also when a concurrent useradd won the race
    except KeyError:
        raise EmbeddedError(f"useradd {name} failed: {result.stderr.strip()}") from None


def _make_traversable(path: Path, user: pwd.struct_passwd) -> None:
    """Let the server's user reach `path`: add search (x, not read) permission for others
    on `path` and every directory above it that the user does not own. Needed because
    `$P2PANDA_HOME` may be owner-only (as `panda key new` creates it); the product never
    takes the permission away again (`home.ensure_home`)."""
    for directory in (path, *path.parents):
        info = directory.stat()
        if info.st_uid != user.pw_uid and not info.st_mode & stat.S_IXOTH:
            directory.chmod(stat.S_IMODE(info.st_mode) | stat.S_IXOTH)


def _make_binaries_usable(user: pwd.struct_passwd) -> None:
    """Some installs (root-owned, umask 077) leave the wheel's binaries unusable to others."""
    install = bin_path().parent
    _make_traversable(install, user)
    if os.stat(bin_path() / "postgres").st_mode & stat.S_IXOTH:
        return
    for directory, _, files in os.walk(install):
        os.chmod(directory, stat.S_IMODE(os.stat(directory).st_mode) | 0o055)
        for name in files:
            path = os.path.join(directory, name)
            mode = stat.S_IMODE(os.stat(path).st_mode)
            os.chmod(path, mode | 0o044 | (0o011 if mode & stat.S_IXUSR else 0))


def _chown_tree(path: Path, user: pwd.struct_passwd) -> None:
    """Hand a data dir back to the server's user if something else took it over."""
    if path.stat().st_uid == user.pw_uid:
        return
    for directory, dirs, files in os.walk(path):
        for name in (directory, *(os.path.join(directory, n) for n in (*dirs, *files))):
            os.chown(name, user.pw_uid, user.pw_gid, follow_symlinks=False)


@contextmanager
def _locked(where: Layout) -> Iterator[None]:
    """An exclusive lock per `$P2PANDA_HOME/postgres`, across processes and threads."""
    with open(where.lock_file, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
