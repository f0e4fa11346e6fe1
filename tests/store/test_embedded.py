"""The embedded server: started once, reused while it runs, safe to start concurrently,
stoppable, and listening on TCP (which Spark's JDBC driver needs)."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg
import pytest

from p2panda_assets.store.embedded import (
    ensure_embedded,
    layout,
    read_password,
    running_port,
    stop_embedded,
)
from tests.postgres import embedded_home

pytestmark = pytest.mark.postgres


def postmaster_pid(home: Path) -> int:
    return int((layout(home).data / "postmaster.pid").read_text().split()[0])


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1].split("/")[0])


@pytest.fixture
def home() -> Iterator[Path]:
    for directory in embedded_home():
        yield directory / "home"
        stop_embedded(directory / "home")


def test_embedded_server_starts_reuses_and_stops(home: Path) -> None:
    with ThreadPoolExecutor(max_workers=3) as pool:  # concurrent first starts
        urls = set(pool.map(lambda _: ensure_embedded(home), range(3)))
    assert len(urls) == 1
    url = urls.pop()
    port = port_of(url)
    password = read_password(layout(home))  # issue 49: the URL carries it
    assert url == f"postgresql://postgres:{password}@127.0.0.1:{port}/postgres"
    assert layout(home).port_file.read_text().strip() == str(port)
    pid = postmaster_pid(home)
    assert ensure_embedded(home) == url and postmaster_pid(home) == pid  # no second server
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT current_setting('server_version_num')::int").fetchone()[0]
    assert stop_embedded(home) is True
    assert running_port(layout(home)) is None
    assert stop_embedded(home) is False


def test_a_restart_keeps_the_remembered_port(home: Path) -> None:
    first = ensure_embedded(home)
    stop_embedded(home)
    assert ensure_embedded(home) == first


@pytest.mark.parametrize("written", ["0", "80", "70000"])
def test_a_port_file_naming_no_port_the_server_can_take_is_replaced(
    home: Path, written: str
) -> None:
    """A port file edited by hand, or by another tool: 0 made every start fail (the
    probe takes 0 as free), 70000 every command (OverflowError), 80 every start as root
    (the probe, as root, binds it; the server's user cannot)."""
    layout(home).port_file.parent.mkdir(parents=True)
    layout(home).port_file.write_text(f"{written}\n")
    port = port_of(ensure_embedded(home))
    assert 1024 <= port <= 65535
    assert layout(home).port_file.read_text().strip() == str(port)
    stop_embedded(home)


def test_a_restart_chooses_a_new_port_when_the_old_one_is_taken(home: Path) -> None:
    port = port_of(ensure_embedded(home))
    stop_embedded(home)
    with socket.socket() as squatter:
        # The stopped server's port may still be in TIME_WAIT.
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        new_port = port_of(ensure_embedded(home))
    assert new_port != port
    assert layout(home).port_file.read_text().strip() == str(new_port)


@pytest.mark.skipif(os.geteuid() != 0, reason="the owner-only home matters when root")
def test_an_owner_only_home_still_starts_as_root(home: Path) -> None:
    home.mkdir(mode=0o700)
    (home / "author.key").write_text("secret\n")
    (home / "author.key").chmod(0o600)
    url = ensure_embedded(home)
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
    assert (home / "author.key").stat().st_mode & 0o777 == 0o600
    assert not home.stat().st_mode & 0o004  # others may pass, not list


def test_a_pid_file_left_by_a_crash_does_not_block_a_start(home: Path) -> None:
    url = ensure_embedded(home)
    stop_embedded(home)
    pid_file = layout(home).data / "postmaster.pid"
    # After a crash the pid may name another live process (pids are reused quickly in
    # containers); PostgreSQL would refuse to start. Here: this very test process.
    pid_file.write_text(f"{os.getpid()}\n{layout(home).data}\n0\n{port_of(url)}\n\n\n\nready\n")
    assert stop_embedded(home) is False
    assert ensure_embedded(home) == url
    assert postmaster_pid(home) != os.getpid()
