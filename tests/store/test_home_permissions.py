"""Issue 14: the embedded server stays up whatever the authoring commands do to
`$P2PANDA_HOME`. As root the server runs as `p2panda-pg`; `panda key new`, `schema init`
and `publish` used to make the home 0700 again, and the server, which reopens
`<data>/global/pg_control` by its absolute path at every checkpoint, shut down with a
PANIC. Here the commands run while the server does, a CHECKPOINT is forced, and the same
postmaster must still answer."""

from __future__ import annotations

import contextlib
import io
import json
import os
import pwd
import shutil
import signal
import stat
import tempfile
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from p2panda_assets.cli.main import main
from p2panda_assets.store.embedded import (
    SYSTEM_USER,
    embedded_status,
    ensure_embedded,
    layout,
    stop_embedded,
)
from tests.postgres import embedded_home

pytestmark = pytest.mark.postgres

NORMAL_USER = "nobody"  # who runs the normal-user case when the tests run as root


def panda(*argv: str | Path) -> str:
    """One `panda` command in this process; its stdout (it must succeed)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(arg) for arg in argv])
    assert code == 0, f"panda {argv}: {err.getvalue()}"
    return out.getvalue()


def author(home: Path, story: Path) -> None:
    panda("schema", "note", "init", "--description", "notes", "--out", story)
    migration = home.parent / "note.yaml"
    migration.write_text("fields:\n  title:\n    type: varchar\n")
    panda("schema", "note", "migrate", migration, "--out", story)
    panda("publish", "create", "--schema", "note", "--field", "title=hi", "--out", story)


def serve_and_author(home: Path, key_first: bool) -> dict:
    """Start the server under `home` and author beside it (the key made before the server
    started, or after), then force a checkpoint; what the test asserts on."""
    os.environ["P2PANDA_HOME"] = str(home)
    story = home.parent / "story.jsonl"
    try:
        if key_first:
            panda("key", "new")  # creates the home: owner-only
        url = ensure_embedded(home)
        before = embedded_status(home)
        with psycopg.connect(url) as conn:
            started = conn.execute("SELECT pg_postmaster_start_time()::text").fetchone()[0]
        if not key_first:
            panda("key", "new")
        author(home, story)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CHECKPOINT")
        with psycopg.connect(url, autocommit=True) as conn:  # a new session after it
            conn.execute("CHECKPOINT")
            answer = conn.execute("SELECT pg_postmaster_start_time()::text, 1").fetchone()
        after = embedded_status(home)
        data = layout(home).data.stat()
        log = layout(home).log.read_text(errors="replace")
        return {
            "pid_before": before.pid,
            "pid_after": after.pid,
            "running_after": after.running,
            "started": started,
            "answer": list(answer),
            "data_uid": data.st_uid,
            "data_mode": stat.S_IMODE(data.st_mode),
            "home_mode": stat.S_IMODE(home.stat().st_mode),
            "modes": {
                name: stat.S_IMODE((home / name).stat().st_mode)
                for name in ("author.key", "authoring.json", "authoring.lock")
            },
            "panics": [line for line in log.splitlines() if "PANIC" in line or "FATAL" in line],
            "entries": len(story.read_text().splitlines()),
        }
    finally:
        stop_embedded(home)


def check(facts: dict, server_uid: int) -> None:
    assert facts["panics"] == []
    assert facts["running_after"] is True
    assert facts["pid_after"] == facts["pid_before"] is not None  # the same postmaster
    assert facts["answer"] == [facts["started"], 1]  # ... started once, and answering
    assert facts["entries"] == 3
    # PostgreSQL's own demands on its data dir: owned by the server's user, 0700.
    assert (facts["data_uid"], facts["data_mode"]) == (server_uid, 0o700)
    # The secrets are protected by their own modes, not by the home's.
    assert facts["modes"] == dict.fromkeys(
        ("author.key", "authoring.json", "authoring.lock"), 0o600
    )


@pytest.fixture
def home() -> Iterator[Path]:
    for directory in embedded_home():
        yield directory / "home"


@pytest.mark.parametrize("key_first", [False, True], ids=["server-first", "key-first"])
def test_authoring_beside_the_running_server_keeps_it_up(
    home: Path, key_first: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As the tests' user: root here, so the server runs as `p2panda-pg`."""
    monkeypatch.delenv("P2PANDA_DATABASE_URL", raising=False)
    monkeypatch.setenv("P2PANDA_HOME", str(home))
    facts = serve_and_author(home, key_first)
    root = os.geteuid() == 0
    check(facts, pwd.getpwnam(SYSTEM_USER).pw_uid if root else os.geteuid())
    if root:  # the server's user passes through the home, others may not list it
        assert facts["home_mode"] & 0o005 == 0o001
    # Every directory above the data dir stays passable for the server's user.
    for directory in layout(home).data.parents:
        if root and directory.stat().st_uid != pwd.getpwnam(SYSTEM_USER).pw_uid:
            assert directory.stat().st_mode & stat.S_IXOTH, directory


def test_a_home_locked_while_the_server_runs_is_opened_by_the_next_command(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`chmod 700 $P2PANDA_HOME` by hand (or by an older `panda`) while the server runs:
    the next command that connects opens the way again, before the checkpoint comes."""
    monkeypatch.delenv("P2PANDA_DATABASE_URL", raising=False)
    monkeypatch.setenv("P2PANDA_HOME", str(home))
    url = ensure_embedded(home)
    pid = embedded_status(home).pid
    home.chmod(0o700)
    assert panda("server", "start") == f"already running: {url}\n"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CHECKPOINT")
    with psycopg.connect(url, autocommit=True) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
    assert embedded_status(home).pid == pid
    assert "PANIC" not in layout(home).log.read_text()
    stop_embedded(home)


def test_authoring_beside_the_running_server_as_a_normal_user(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same as a user that is not root: the server runs as that user itself. As root,
    a forked child of this process becomes `nobody` (whose interpreter may be out of its
    reach: it keeps the one loaded here)."""
    monkeypatch.delenv("P2PANDA_DATABASE_URL", raising=False)
    scratch = Path(tempfile.mkdtemp(prefix="p2panda-test-user-"))
    home = scratch / "home"
    monkeypatch.setenv("P2PANDA_HOME", str(home))
    try:
        if os.geteuid() != 0:
            facts = serve_and_author(home, key_first=False)
            check(facts, os.geteuid())
            return
        user = pwd.getpwnam(NORMAL_USER)
        os.chown(scratch, user.pw_uid, user.pw_gid)
        facts = run_as(user, serve_and_author, home, False)
        check(facts, user.pw_uid)
        assert facts["home_mode"] == 0o700  # the server runs as the home's owner: no way in
    finally:
        _kill_left_server(home)
        shutil.rmtree(scratch, ignore_errors=True)


def test_the_home_keeps_its_mode_and_new_secrets_are_owner_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No server needed: the mode bits the commands set, for any user."""
    home = tmp_path / "home"
    home.mkdir(mode=0o751)
    home.chmod(0o751)  # as a server start as root leaves it (others: search only)
    monkeypatch.setenv("P2PANDA_HOME", str(home))
    panda("key", "new")
    author(home, tmp_path / "story.jsonl")
    assert stat.S_IMODE(home.stat().st_mode) == 0o751
    for name in ("author.key", "authoring.json", "authoring.lock"):
        assert stat.S_IMODE((home / name).stat().st_mode) == 0o600, name
    fresh = tmp_path / "fresh" / "home"
    monkeypatch.setenv("P2PANDA_HOME", str(fresh))
    panda("key", "new")
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o700  # a home made by a command: private


def run_as(user: pwd.struct_passwd, function: Callable[..., dict], *args: object) -> dict:
    """`function(*args)` in a forked child running as `user`; its JSON-able result."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        status = 1
        try:
            os.close(read)
            os.setgroups([])
            os.setgid(user.pw_gid)
            os.setuid(user.pw_uid)
            payload = {"result": function(*args)}
            status = 0
        except BaseException:
            payload = {"error": traceback.format_exc()}
        try:
            with os.fdopen(write, "w") as pipe:
                json.dump(payload, pipe, default=str)
        finally:
            os._exit(status)
    os.close(write)
    with os.fdopen(read) as pipe:
        payload = json.loads(pipe.read() or '{"error": "no answer"}')
    os.waitpid(pid, 0)
    assert "error" not in payload, payload.get("error")
    return payload["result"]


def _kill_left_server(home: Path) -> None:
    """A server the child could not stop (it stops its own): a fast shutdown by signal."""
    pid = embedded_status(home).pid
    if pid is not None:
        os.kill(pid, signal.SIGINT)
