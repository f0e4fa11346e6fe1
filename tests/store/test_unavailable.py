"""A database that cannot be reached is a reason code, not a traceback."""

from __future__ import annotations

import socket

import pytest

from p2panda_assets.cli.main import main
from p2panda_assets.errors import P2pandaError, Reason
from p2panda_assets.store.database import connect


def unused_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_an_unreachable_database_is_database_unavailable(monkeypatch, capsys) -> None:
    url = f"postgresql://postgres@127.0.0.1:{unused_port()}/postgres?connect_timeout=2"
    with pytest.raises(P2pandaError) as raised:
        connect(url)
    assert raised.value.reason is Reason.DATABASE_UNAVAILABLE
    monkeypatch.setenv("P2PANDA_DATABASE_URL", url)
    assert main(["status"]) == 1
    assert capsys.readouterr().err.startswith("error: database-unavailable: ")
