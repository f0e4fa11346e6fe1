"""`panda server start|stop|status`: the embedded server managed from the command line."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from p2panda_assets.cli.main import main
from p2panda_assets.cli.server_cmd import EXIT_NOT_RUNNING, redacted
from p2panda_assets.store.database import DATABASE_URL_ENV
from p2panda_assets.store.embedded import layout, read_password, running_port
from tests.postgres import embedded_home

pytestmark = pytest.mark.postgres


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def fields(out: str) -> dict[str, str]:
    return dict(line.split(": ", 1) for line in out.splitlines())


@pytest.fixture
def home(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.delenv(DATABASE_URL_ENV, raising=False)
    for directory in embedded_home():
        monkeypatch.setenv("P2PANDA_HOME", str(directory / "home"))
        yield directory / "home"


def test_status_start_stop(capsys, home: Path) -> None:
    data = layout(home).data
    code, out, err = run(capsys, "server", "status")
    assert (code, err) == (EXIT_NOT_RUNNING, "")
    assert fields(out) == {
        "embedded server": "not running",
        "port": "-",
        "data directory": f"{data} (not created yet)",
        "url": "-",
        "password file": f"{layout(home).password_file} (not created yet)",
        "log": str(layout(home).log),
    }

    code, out, err = run(capsys, "server", "start")
    assert (code, err) == (0, "")
    port = running_port(layout(home))
    password = read_password(layout(home))  # issue 49: the URL carries it
    url = f"postgresql://postgres:{password}@127.0.0.1:{port}/postgres"
    assert out == f"started: {url}\n"
    assert run(capsys, "server", "start") == (0, f"already running: {url}\n", "")

    code, out, _ = run(capsys, "server", "status")
    shown = fields(out)
    assert code == 0
    assert shown["embedded server"] == "running"
    assert (shown["port"], shown["url"], shown["data directory"]) == (str(port), url, str(data))
    assert shown["password file"] == str(layout(home).password_file)
    pid = int((data / "postmaster.pid").read_text().split()[0])
    assert shown["pid"] == str(pid)
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)

    assert run(capsys, "server", "stop") == (0, f"stopped: {data}\n", "")
    assert running_port(layout(home)) is None
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(url, connect_timeout=5)
    assert "database system is shut down" in layout(home).log.read_text()
    assert run(capsys, "server", "stop") == (0, f"not running: {data}\n", "")
    code, out, _ = run(capsys, "server", "status")
    assert code == EXIT_NOT_RUNNING
    assert fields(out)["port"] == f"{port} (tried first at a start)"
    assert fields(out)["data directory"] == str(data)


def test_with_an_external_server_the_commands_say_so(
    capsys, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DATABASE_URL_ENV, "postgresql://app:s3cret@db.example:5432/p2panda")
    line = (
        "external server in use: P2PANDA_DATABASE_URL=postgresql://app:***@db.example:5432/p2panda"
    )
    data = layout(home).data
    code, out, err = run(capsys, "server", "status")
    assert (code, err) == (0, "")
    assert out == f"{line}\nembedded server: not used ({data})\n"
    code, out, _ = run(capsys, "server", "start")
    assert (code, out) == (0, f"{line}: the embedded server is not started\n")
    assert not data.exists()
    assert run(capsys, "server", "stop") == (0, f"{line}\nnot running: {data}\n", "")


def test_stop_stops_an_embedded_server_left_running_beside_an_external_one(
    capsys, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert run(capsys, "server", "start")[0] == 0
    monkeypatch.setenv(DATABASE_URL_ENV, "postgresql://app@db.example/p2panda")
    code, out, _ = run(capsys, "server", "status")
    assert (code, out.splitlines()[1]) == (
        0,
        f"embedded server: running, not used ({layout(home).data})",
    )
    code, out, _ = run(capsys, "server", "stop")
    assert (code, out.splitlines()[-1]) == (0, f"stopped: {layout(home).data}")
    assert running_port(layout(home)) is None


def test_passwords_are_not_shown() -> None:
    assert redacted("postgresql://u:pw@h/db") == "postgresql://u:***@h/db"
    assert redacted("postgresql://u@h/db?password=pw&sslmode=require") == (
        "postgresql://u@h/db?password=***&sslmode=require"
    )
    assert redacted("host=h user=u password=pw dbname=d") == "host=h user=u password=*** dbname=d"
    assert redacted("postgresql://u@h:5432/db") == "postgresql://u@h:5432/db"
