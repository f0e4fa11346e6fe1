"""Where the driver listens and what it tells executors (`driver_address`), without Spark:
from P2PANDA_SPARK_DRIVER_HOST and P2PANDA_SPARK_DRIVER_BIND if set, else from the master,
and never from SPARK_LOCAL_IP (pandera sets it to 127.0.0.1 on import)."""

from __future__ import annotations

import socket

import pytest

from p2panda_assets.pipeline.spark import driver_address
from p2panda_assets.pipeline.spark.driver_address import (
    DRIVER_BIND_ENV,
    DRIVER_HOST_ENV,
    address_toward,
    driver_address_settings,
    master_address,
)
from p2panda_assets.pipeline.spark.session import spark_config


@pytest.fixture(autouse=True)
def unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DRIVER_HOST_ENV, raising=False)
    monkeypatch.delenv(DRIVER_BIND_ENV, raising=False)
    # As pandera leaves it: it must decide nothing.
    monkeypatch.setenv("SPARK_LOCAL_IP", "127.0.0.1")


def settings(host: str, bind: str) -> dict[str, str]:
    return {"spark.driver.host": host, "spark.driver.bindAddress": bind}


@pytest.mark.parametrize("master", ["local", "local[*]", "local[2]", "local[2,3]"])
def test_a_local_master_keeps_the_driver_on_loopback(master: str) -> None:
    assert driver_address_settings(master) == settings("127.0.0.1", "127.0.0.1")


def test_a_master_on_loopback_gets_the_loopback_address() -> None:
    assert driver_address_settings("spark://127.0.0.1:7077") == settings("127.0.0.1", "127.0.0.1")


def test_the_address_toward_the_master_is_the_routes_source(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The kernel's source address for a UDP socket connected toward the master; the
    driver listens on that address only."""
    seen: list[object] = []

    class Probe:
        def __init__(self, *args: object) -> None:
            pass

        def __enter__(self) -> Probe:
            return self

        def __exit__(self, *args: object) -> None:
            pass

        def connect(self, target: object) -> None:
            seen.append(target)

        def getsockname(self) -> tuple[str, int]:
            return ("10.9.8.1", 40000)

    def resolve(host: str, port: int, **kwargs: object) -> list[tuple]:
        assert (host, port, kwargs) == ("spark-master", 7077, {"type": socket.SOCK_DGRAM})
        return [(socket.AF_INET, socket.SOCK_DGRAM, 17, "", ("10.9.8.2", 7077))]

    monkeypatch.setattr(driver_address.socket, "getaddrinfo", resolve)
    monkeypatch.setattr(driver_address.socket, "socket", Probe)
    assert driver_address_settings("spark://spark-master:7077") == settings("10.9.8.1", "10.9.8.1")
    assert seen == [("10.9.8.2", 7077)]


def test_without_a_route_the_driver_goes_by_its_host_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A host name may resolve elsewhere to another address than here (Debian maps its
    own to 127.0.1.1): the driver then listens on every interface."""

    def unresolvable(*args: object, **kwargs: object) -> list[tuple]:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(driver_address.socket, "getaddrinfo", unresolvable)
    monkeypatch.setattr(driver_address.socket, "gethostname", lambda: "driver-box")
    assert driver_address_settings("spark://nowhere:7077") == settings("driver-box", "0.0.0.0")
    # Nor a master that names no host (anything but local and spark://).
    assert driver_address_settings("yarn") == settings("driver-box", "0.0.0.0")


def test_a_given_address_is_advertised_and_listened_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """As the Helm chart gives the pod's IP."""
    monkeypatch.setenv(DRIVER_HOST_ENV, "10.42.0.17")
    assert driver_address_settings("spark://10.42.1.2:7077") == settings("10.42.0.17", "10.42.0.17")


def test_a_given_name_on_a_cluster_listens_on_every_interface(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As compose gives the service name `code-server`: the workers resolve it to the
    container's address, which this container may not see it as."""
    monkeypatch.setenv(DRIVER_HOST_ENV, " code-server ")
    assert driver_address_settings("spark://spark-master:7077") == settings(
        "code-server", "0.0.0.0"
    )


def test_a_given_name_on_a_local_master_is_listened_on_by_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Nothing connects from elsewhere: the driver resolves the name it gives itself."""
    monkeypatch.setenv(DRIVER_HOST_ENV, "code-server")
    assert driver_address_settings("local[*]") == settings("code-server", "code-server")


def test_a_given_bind_address_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    """Behind NAT the advertised address is not this host's to bind."""
    monkeypatch.setenv(DRIVER_HOST_ENV, "203.0.113.7")
    monkeypatch.setenv(DRIVER_BIND_ENV, "0.0.0.0")
    assert driver_address_settings("spark://10.0.0.2:7077") == settings("203.0.113.7", "0.0.0.0")


def test_blank_settings_count_as_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DRIVER_HOST_ENV, "  ")
    monkeypatch.setenv(DRIVER_BIND_ENV, "")
    assert driver_address_settings("local[2]") == settings("127.0.0.1", "127.0.0.1")


@pytest.mark.parametrize(
    ("master", "address"),
    [
        ("spark://10.0.0.2:7077", ("10.0.0.2", 7077)),
        ("spark://spark-master", ("spark-master", 7077)),
        ("spark://first:7001,second:7002", ("first", 7001)),
        ("spark://[::1]:7077", ("::1", 7077)),
        ("spark://", None),
        ("local[*]", None),
        ("k8s://https://10.0.0.1:443", None),
    ],
)
def test_the_masters_address(master: str, address: tuple[str, int] | None) -> None:
    assert master_address(master) == address


def test_the_route_toward_loopback_is_loopback() -> None:
    assert address_toward("127.0.0.1", 7077) == "127.0.0.1"


def test_every_session_of_the_product_sets_both(monkeypatch: pytest.MonkeyPatch) -> None:
    """`spark_config` sets them, for the master it is given or SPARK_MASTER's."""
    monkeypatch.setenv(DRIVER_HOST_ENV, "code-server")
    config = spark_config("spark://spark-master:7077")
    assert config["spark.driver.host"] == "code-server"
    assert config["spark.driver.bindAddress"] == "0.0.0.0"
    monkeypatch.delenv(DRIVER_HOST_ENV)
    monkeypatch.setenv("SPARK_MASTER", "local[2]")
    config = spark_config()
    assert config["spark.driver.host"] == config["spark.driver.bindAddress"] == "127.0.0.1"
