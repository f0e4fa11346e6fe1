"""Where the Spark driver listens and which address it gives the executors.

On a standalone cluster the executors connect back to the driver (its scheduler, its
block manager, the jars it serves) at `spark.driver.host`. Left unset, Spark takes it
from SPARK_LOCAL_IP, and pandera sets that to 127.0.0.1 on import whenever it is unset
(`pandera/external_config.py`): the driver then tells executors on other hosts to reach
it at their own loopback, they exit with `Failed to connect to localhost/127.0.0.1`, and
every run hangs. So the product sets both options itself, from
P2PANDA_SPARK_DRIVER_HOST (and P2PANDA_SPARK_DRIVER_BIND), or from the master.
"""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

from p2panda_assets.tuning import ENVIRONMENT, tuning

DRIVER_HOST_ENV = ENVIRONMENT["driver_host"]
DRIVER_BIND_ENV = ENVIRONMENT["driver_bind"]
LOOPBACK = "127.0.0.1"
EVERY_INTERFACE = "0.0.0.0"
STANDALONE_PORT = 7077  # a `spark://host` master without a port


def is_local(master: str) -> bool:
    """`local`, `local[*]`, `local[N]`, `local[N,F]`: the executors run in the driver's JVM."""
    return master == "local" or master.startswith("local[")


def master_address(master: str) -> tuple[str, int] | None:
    """Host and port of a `spark://host:port` master (the first of an HA list), else None."""
    if not master.startswith("spark://"):
        return None
    first = master.removeprefix("spark://").split(",")[0]
    try:
        parts = urlsplit(f"//{first}")
        host, port = parts.hostname, parts.port
    except ValueError:
        return None
    return (host, port or STANDALONE_PORT) if host else None


def address_toward(host: str, port: int) -> str | None:
    """This host's address on the route toward `host`: the source address the kernel picks
    for a UDP socket connected there (connecting a UDP socket sends nothing). None if the
    name does not resolve or there is no route."""
    try:
        candidates = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)
    except OSError:
        return None
    for family, kind, proto, _, target in candidates:
        try:
            with socket.socket(family, kind, proto) as probe:
                probe.connect(target)
                return str(probe.getsockname()[0])
        except OSError:
            continue
    return None


def driver_host(master: str) -> str:
    """The address or name executors reach the driver at: P2PANDA_SPARK_DRIVER_HOST if set;
    on a local master, loopback (nothing connects from elsewhere); on a standalone master,
    this host's address toward it, which the master's hosts can reach back by the same
    route; failing that, this host's name."""
    given = tuning().driver_host
    if given:
        return given
    if is_local(master):
        return LOOPBACK
    target = master_address(master)
    found = address_toward(*target) if target else None
    return found or socket.gethostname()


def is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def driver_bind_address(master: str, host: str) -> str:
    """Where the driver listens: P2PANDA_SPARK_DRIVER_BIND if set. Else on a cluster master,
    for a host given by name, every interface: the name is resolved by the executors' hosts
    (a compose service name: the container's address there), which need not give what it
    gives here (Debian maps its own host name to 127.0.1.1). Else the host itself: an
    address (the pod's, the one toward the master, loopback) is this host's own to bind,
    and on a local master only the driver resolves the name it advertises."""
    given = tuning().driver_bind
    if given:
        return given
    if not is_local(master) and not is_address(host):
        return EVERY_INTERFACE
    return host


def driver_address_settings(master: str) -> dict[str, str]:
    """`spark.driver.host` and `spark.driver.bindAddress` for a session on `master`, set
    explicitly so that no library's change to the environment (pandera's SPARK_LOCAL_IP)
    decides where executors look for the driver."""
    host = driver_host(master)
    return {
        "spark.driver.host": host,
        "spark.driver.bindAddress": driver_bind_address(master, host),
    }
