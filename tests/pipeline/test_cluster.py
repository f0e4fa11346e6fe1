"""`SPARK_MASTER=spark://host:port` runs on a Spark cluster: a standalone master and one
worker started from the pyspark wheel on loopback run the whole pipeline, and the tables
and accounts equal `reduce_corpus` exactly, as they do on `local[*]`. Then across hosts:
master and worker in a network namespace of their own, where "localhost" is not the
driver's, and the driver outside it, as on a compose stack or a Kubernetes cluster.

The driver runs in a subprocess (`tests.pipeline.cluster_check`): a JVM holds one
SparkContext, and the test session's local one may already be up.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import random
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pyspark
import pytest

from p2panda_assets.failpoints import FAILPOINT_ENV, Failpoint
from p2panda_assets.pipeline.spark.driver_address import DRIVER_BIND_ENV, DRIVER_HOST_ENV

pytestmark = [pytest.mark.spark, pytest.mark.postgres]

HOST = "127.0.0.1"
SPARK_HOME = Path(pyspark.__file__).parent
START_TIMEOUT = 45  # seconds for the master to serve its UI and the worker to register
DRIVER_TIMEOUT = 180  # seconds for the whole driver subprocess (~40-75 s seen)
ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Cluster:
    master_url: str
    ui_url: str
    work_dir: Path  # the worker's: one directory per application, one per executor
    scratch: Path

    def state(self) -> dict:
        """The master's JSON status page (workers, active and completed applications).

        Spark's `WebUI.bind` opens the port before it adds the handlers, one at a time, and
        the master's `/` page comes before `/json`: a request in between is answered 200
        with the HTML page. That answer raises `NotServing`, which `wait_for` retries.
        """
        with urllib.request.urlopen(f"{self.ui_url}/json/", timeout=5) as response:
            if response.headers.get_content_subtype() != "json":  # Spark's is text/json
                raise NotServing(f"/json/ answered {response.headers.get_content_type()}")
            return json.load(response)


class NotServing(OSError):
    """The master's UI is up but does not serve its JSON page yet."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((HOST, 0))
        return probe.getsockname()[1]


def spark_env(scratch: Path, local_ip: str = HOST) -> dict[str, str]:
    """Everything binds to `local_ip`, loopback unless said otherwise (Spark would otherwise
    pick the first interface), and scratch space (shuffle files, fetched jars) stays under
    the test's own directory."""
    return {
        **os.environ,
        "SPARK_HOME": str(SPARK_HOME),
        "SPARK_LOCAL_IP": local_ip,
        "SPARK_LOCAL_DIRS": str(scratch),
    }


def start_daemon(
    args: list[str],
    log: Path,
    scratch: Path,
    env: dict[str, str] | None = None,
    netns: str | None = None,
) -> subprocess.Popen:
    """A Spark daemon in a process group of its own (so its executors die with it), in the
    network namespace `netns` if given (`ip netns exec` execs it: same process); `env` is
    added to its environment, and its executors'."""
    prefix = ["ip", "netns", "exec", netns] if netns else []
    with log.open("wb") as out:
        return subprocess.Popen(
            [*prefix, str(SPARK_HOME / "bin" / "spark-class"), *args],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**spark_env(scratch), **(env or {})},
            start_new_session=True,
        )


def kill_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


def stop_group(process: subprocess.Popen) -> None:
    """TERM the daemon's process group, then KILL whatever is left in it (an executor
    JVM or its Python workers may outlive the daemon that started them)."""
    kill_group(process.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=10)
    kill_group(process.pid, signal.SIGKILL)
    process.wait(timeout=10)


def wait_for(check: Callable[[], bool], what: str, timeout: float, logs: list[Path]) -> None:
    """Poll `check` until it is true; fail with the daemons' log tails otherwise."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.5)
    tails = "\n".join(f"--- {log}\n{log.read_text(errors='replace')[-3000:]}" for log in logs)
    pytest.fail(f"{what} within {timeout} s\n{tails}")


@contextlib.contextmanager
def standalone_cluster(
    tmp_path: Path,
    host: str = HOST,
    ports: tuple[int, int] | None = None,
    worker_env: dict[str, str] | None = None,
    netns: str | None = None,
) -> Iterator[Cluster]:
    """A standalone master and one worker (1 core, 1 GiB) on `host` (in `netns` if given),
    at `ports` (master, UI; free ones if not given); `worker_env` goes to the executors."""
    master_port, ui_port = ports or (free_port(), free_port())
    properties = tmp_path / "spark-defaults.conf"
    # The REST submission server would take the fixed port 6066: not needed here.
    properties.write_text("spark.master.rest.enabled false\n")
    master_log, worker_log = tmp_path / "master.log", tmp_path / "worker.log"
    work_dir, scratch = tmp_path / "work", tmp_path / "scratch"
    scratch.mkdir()
    master_url = f"spark://{host}:{master_port}"
    cluster = Cluster(master_url, f"http://{host}:{ui_port}", work_dir, scratch)
    bound = {"SPARK_LOCAL_IP": host}
    daemons = [
        start_daemon(
            [
                "org.apache.spark.deploy.master.Master",
                *("--host", host, "--port", str(master_port), "--webui-port", str(ui_port)),
                *("--properties-file", str(properties)),
            ],
            master_log,
            scratch,
            bound,
            netns,
        )
    ]
    try:
        wait_for(lambda: cluster.state()["status"] == "ALIVE", "no master", 30, [master_log])
        daemons.append(
            start_daemon(
                [
                    "org.apache.spark.deploy.worker.Worker",
                    master_url,
                    *("--host", host, "--webui-port", "0", "--cores", "1", "--memory", "1g"),
                    *("--work-dir", str(work_dir), "--properties-file", str(properties)),
                ],
                worker_log,
                scratch,
                {**bound, **(worker_env or {})},
                netns,
            )
        )
        wait_for(
            lambda: cluster.state()["aliveworkers"] == 1,
            "no worker registered",
            START_TIMEOUT,
            [master_log, worker_log],
        )
        yield cluster
    finally:
        for daemon in reversed(daemons):
            stop_group(daemon)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """A standalone cluster on 127.0.0.1, whose executors have each writing task's first
    attempt die after its commit: Spark runs it again, which must write nothing twice."""
    with standalone_cluster(tmp_path, worker_env={FAILPOINT_ENV: Failpoint.TASK_COMMITTED}) as up:
        yield up


def run_driver(
    database_url: str, cluster: Cluster, tmp_path: Path, env: dict[str, str | None] | None = None
) -> dict:
    """`tests.pipeline.cluster_check` in its own process group; its last line, parsed.
    `env` overrides the driver's environment (None: unset).

    Two shuffle partitions, not the default eight: the cluster has one core, and the
    pipeline runs ~190 small stages on this corpus, so task overhead is what costs.

    An executor that cannot connect to the driver exits, the worker starts another, and
    the driver waits for resources for ever: that fails the test as soon as an executor
    says so, with what it said, not at the timeout."""
    settings: dict[str, str | None] = {
        **spark_env(cluster.scratch),
        "P2PANDA_HOME": str(tmp_path / "home"),
        "SPARK_MASTER": cluster.master_url,
        "P2PANDA_SHUFFLE_PARTITIONS": "2",
        **(env or {}),
    }
    out_path, err_path = tmp_path / "driver.out", tmp_path / "driver.err"
    command = [sys.executable, "-m", "tests.pipeline.cluster_check"]
    with out_path.open("wb") as out, err_path.open("wb") as err:
        driver = subprocess.Popen(
            [*command, database_url, cluster.master_url],
            cwd=ROOT,
            env={key: value for key, value in settings.items() if value is not None},
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,
        )
    deadline = time.monotonic() + DRIVER_TIMEOUT
    earlier = set(cluster.work_dir.glob("*"))  # other drivers' applications
    try:
        while driver.poll() is None:
            stranded = _stranded_executors(cluster.work_dir, earlier)
            if stranded:
                pytest.fail(
                    f"executors cannot connect to the driver:\n{stranded}\n"
                    f"--- driver stderr\n{_tail(err_path)}"
                )
            if time.monotonic() > deadline:
                pytest.fail(f"the driver took over {DRIVER_TIMEOUT} s\n{_tail(err_path)}")
            time.sleep(1)
    finally:
        kill_group(driver.pid, signal.SIGKILL)  # the driver's JVM, should it outlive Python
        with contextlib.suppress(subprocess.TimeoutExpired):
            driver.wait(timeout=10)
    results = [line for line in out_path.read_text().splitlines() if line.startswith("{")]
    if not results:
        pytest.fail(f"the driver printed no result (exit {driver.returncode})\n{_tail(err_path)}")
    return json.loads(results[-1])


def _tail(path: Path, chars: int = 5000) -> str:
    return path.read_text(errors="replace")[-chars:]


def _stranded_executors(work_dir: Path, earlier: set[Path]) -> str:
    """What executors (of applications not in `earlier`) that never ran a task said about
    connecting to the driver, with the driver URL they were given; empty if none did."""
    found = []
    for path in sorted(work_dir.glob("*/*/stderr")):
        if path.parent.parent in earlier:
            continue
        text = path.read_text(errors="replace")
        failures = re.findall(r".*Failed to connect to .*", text)
        if failures and "Running task" not in text:
            url = re.search(r"--driver-url\W+(\S+?)[\"' ]", text)
            given = url.group(1) if url else "(no --driver-url found)"
            found.append(f"{path}: given {given}: {failures[0].strip()}")
    return "\n".join(found)


def test_the_pipeline_on_a_standalone_cluster_equals_the_engine(
    cluster: Cluster, database_url: str, tmp_path: Path
) -> None:
    evidence = run_driver(database_url, cluster, tmp_path)
    assert evidence["tables_equal"], evidence
    assert evidence["accounts_equal"], evidence
    assert evidence["rows"] and all(evidence["rows"].values()), evidence
    # The work ran on the cluster: the driver's master, a live executor, and the master
    # listing the application as finished.
    assert evidence["master"] == cluster.master_url
    assert evidence["executors"] >= 1
    finished = {app["id"]: app for app in cluster.state()["completedapps"]}
    assert evidence["app_id"] in finished
    assert finished[evidence["app_id"]]["name"] == "p2panda-assets"
    # The executor fetched the JDBC driver the session ships (spark.jars): JDBC writes
    # run on executors, and there is no Maven to download it from.
    executor_dir = cluster.work_dir / evidence["app_id"]
    assert list(executor_dir.glob("*/postgresql.jar")), sorted(executor_dir.rglob("*"))
    stderr = _executor_stderr(executor_dir)
    assert re.search(r"Running task \d+\.0 in stage", stderr)
    # Tasks were run again after their first attempt died (`Failpoint.TASK_COMMITTED`).
    assert re.search(r"Running task \d+\.1 in stage", stderr), stderr[-5000:]


def _executor_stderr(app_dir: Path) -> str:
    return "".join(path.read_text(errors="replace") for path in app_dir.glob("*/stderr"))


# --- across hosts --------------------------------------------------------------------------

# The master's ports inside the namespace, which is the test's own: nothing else binds there.
NAMESPACE_PORTS = (7077, 8080)
IP_TIMEOUT = 30  # seconds for one `ip` command


def ip(*args: str, check: bool = True) -> str:
    """Run Debian's `ip` (iproute2); its output. Fails the test (never skips it) if the
    command is missing or refused."""
    try:
        done = subprocess.run(
            ["ip", *args], capture_output=True, text=True, timeout=IP_TIMEOUT, check=False
        )
    except FileNotFoundError:
        pytest.fail("`ip` is missing: Debian's iproute2 has it (scripts/setup installs it)")
    if check and done.returncode != 0:
        pytest.fail(f"ip {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


def unused_subnet() -> ipaddress.IPv4Network:
    """A random /30 in 10.0.0.0/8 that no interface or route of this host overlaps."""
    taken: list[ipaddress.IPv4Network] = []
    for line in ip("-4", "-o", "addr", "show").splitlines():
        words = line.split()
        if "inet" in words:
            taken.append(ipaddress.IPv4Network(words[words.index("inet") + 1], strict=False))
    for line in ip("-4", "route", "show", "table", "all").splitlines():
        for word in line.split()[:2]:
            with contextlib.suppress(ValueError):
                taken.append(ipaddress.IPv4Network(word, strict=False))
    choose = random.SystemRandom()
    for _ in range(100):
        a, b, c = choose.randrange(256), choose.randrange(256), choose.randrange(64)
        candidate = ipaddress.IPv4Network(f"10.{a}.{b}.{4 * c}/30")
        if not any(candidate.overlaps(network) for network in taken):
            return candidate
    pytest.fail(f"no free /30 in 10.0.0.0/8 beside {taken}")


@dataclass(frozen=True)
class Namespace:
    name: str
    outside: str  # this end of the veth pair, in the test's namespace: the driver's address
    inside: str  # the other end, in the namespace: the master's and worker's
    driver_name: str  # a name for `outside` in the namespace only, as a compose service's


@pytest.fixture(scope="module")
def worker_namespace() -> Iterator[Namespace]:
    """A network namespace `p2p-worker-<random>` joined to this one by a veth pair: a /30 of
    its own, the outer end here, the inner end and its own loopback there, and a hosts
    file of its own (`ip netns exec` mounts /etc/netns/NAME/hosts over /etc/hosts) that
    names the outer end. Every process left in it is killed, and the pair, the namespace
    and its hosts file deleted, even on failure."""
    token = os.urandom(3).hex()
    name, outer, inner = f"p2p-worker-{token}", f"p2pd-{token}", f"p2pw-{token}"
    driver_name = f"p2p-driver-{token}"
    subnet = unused_subnet()
    outside, inside = (str(host) for host in subnet.hosts())
    etc = Path("/etc/netns") / name
    made_etc_netns = not etc.parent.exists()
    ip("netns", "add", name)
    try:
        etc.mkdir(parents=True)
        hosts = Path("/etc/hosts").read_text() if Path("/etc/hosts").exists() else ""
        (etc / "hosts").write_text(f"{hosts.rstrip()}\n{outside} {driver_name}\n".lstrip())
        ip("link", "add", outer, "type", "veth", "peer", "name", inner)
        ip("link", "set", inner, "netns", name)
        ip("addr", "add", f"{outside}/30", "dev", outer)
        ip("link", "set", outer, "up")
        ip("-n", name, "addr", "add", f"{inside}/30", "dev", inner)
        ip("-n", name, "link", "set", inner, "up")
        ip("-n", name, "link", "set", "lo", "up")
        yield Namespace(name, outside, inside, driver_name)
    finally:
        for pid in ip("netns", "pids", name, check=False).split():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
        ip("link", "del", outer, check=False)
        ip("netns", "del", name, check=False)
        shutil.rmtree(etc, ignore_errors=True)
        if made_etc_netns:
            with contextlib.suppress(OSError):  # another namespace's hosts file may be there
                etc.parent.rmdir()


class Relay:
    """A TCP relay from (`host`, a free port) to `upstream`: the test's PostgreSQL listens
    on loopback here, which is not the namespace's. Connections are relayed from here, so
    the server sees them come from loopback (no change to its configuration). Remembers
    the addresses its clients came from."""

    def __init__(self, host: str, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.listener = socket.create_server((host, 0))
        self.listener.settimeout(0.5)
        self.address: tuple[str, int] = self.listener.getsockname()[:2]
        self.peers: set[str] = set()
        self.closing = threading.Event()
        self.threads = [threading.Thread(target=self._accept, daemon=True)]
        self.threads[0].start()

    def _accept(self) -> None:
        while not self.closing.is_set():
            try:
                client, peer = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.peers.add(peer[0])
            thread = threading.Thread(target=self._relay, args=(client,), daemon=True)
            self.threads.append(thread)
            thread.start()

    def _relay(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(self.upstream, timeout=10)
        except OSError:
            client.close()
            return
        with client, upstream:
            client.setblocking(True)
            upstream.settimeout(None)
            other = {client: upstream, upstream: client}
            while other and not self.closing.is_set():
                readable, _, _ = select.select(list(other), [], [], 0.5)
                for source in readable:
                    try:
                        data = source.recv(65536)
                        if data:
                            other[source].sendall(data)
                            continue
                        other[source].shutdown(socket.SHUT_WR)
                    except OSError:
                        return
                    del other[source]

    def close(self) -> None:
        self.closing.set()
        self.listener.close()
        for thread in self.threads:
            thread.join(timeout=5)


def relayed_url(url: str, host: str, port: int) -> str:
    """`url` (postgresql://...) pointing at `host`:`port` instead."""
    parts = urlsplit(url)
    user = parts.netloc.rpartition("@")[0]
    return parts._replace(netloc=f"{user}@{host}:{port}" if user else f"{host}:{port}").geturl()


@pytest.fixture(scope="module")
def database_relay(session_database: str, worker_namespace: Namespace) -> Iterator[Relay]:
    """A `Relay` to the test database's server on the driver's end of the veth pair, where
    the executors in the namespace reach it as well as the driver."""
    parts = urlsplit(session_database)
    if not parts.hostname or "," in parts.netloc or "host=" in parts.query:
        pytest.fail(f"the test database is not at one TCP host: {session_database}")
    relay = Relay(worker_namespace.outside, (parts.hostname, parts.port or 5432))
    try:
        yield relay
    finally:
        relay.close()


@pytest.fixture(scope="module")
def cluster_across_hosts(
    tmp_path_factory: pytest.TempPathFactory, worker_namespace: Namespace
) -> Iterator[Cluster]:
    """A standalone master and worker in `worker_namespace`, on its address: their
    executors' "localhost" is the namespace's loopback, not the driver's. One for the
    module's drivers (it takes 15-45 s to start)."""
    where = tmp_path_factory.mktemp("cluster-across-hosts")
    with standalone_cluster(
        where, worker_namespace.inside, NAMESPACE_PORTS, netns=worker_namespace.name
    ) as up:
        yield up


@pytest.mark.parametrize("named", [False, True], ids=["address-toward-the-master", "by-name"])
def test_executors_on_another_host_reach_the_driver(
    named: bool,
    cluster_across_hosts: Cluster,
    database_relay: Relay,
    database_url: str,
    worker_namespace: Namespace,
    tmp_path: Path,
) -> None:
    """The driver here, as the code server beside a Spark cluster, with none of the
    settings the loopback test gives it: no SPARK_LOCAL_IP of the test's (pandera sets it
    to 127.0.0.1 on import; `cluster_check` imports it, as the code server does).
    Executors reach it at this host's address toward the master (`driver_address`), or,
    `named`, at the name P2PANDA_SPARK_DRIVER_HOST gives, which only the namespace
    resolves (as compose gives the code server's service name): the driver then listens on
    every interface. Either way they write to PostgreSQL from their namespace."""
    env: dict[str, str | None] = dict.fromkeys(("SPARK_LOCAL_IP", DRIVER_HOST_ENV, DRIVER_BIND_ENV))
    if named:
        env[DRIVER_HOST_ENV] = worker_namespace.driver_name
    url = relayed_url(database_url, *database_relay.address)
    database_relay.peers.clear()
    evidence = run_driver(url, cluster_across_hosts, tmp_path, env)
    assert evidence["tables_equal"], evidence
    assert evidence["accounts_equal"], evidence
    assert evidence["rows"] and all(evidence["rows"].values()), evidence
    assert evidence["master"] == cluster_across_hosts.master_url
    assert evidence["executors"] >= 1
    # What the driver told the executors, and where it listened.
    if named:
        assert evidence["driver_host"] == worker_namespace.driver_name, evidence
        assert evidence["driver_bind_address"] == "0.0.0.0", evidence
    else:
        assert evidence["driver_host"] == worker_namespace.outside, evidence
        assert evidence["driver_bind_address"] == worker_namespace.outside, evidence
    # Tasks ran in the namespace, and wrote to the database from there.
    stderr = _executor_stderr(cluster_across_hosts.work_dir / evidence["app_id"])
    assert re.search(r"Running task \d+\.0 in stage", stderr), stderr[-5000:]
    assert worker_namespace.inside in database_relay.peers, database_relay.peers
