"""`SPARK_MASTER=spark://host:port` runs on a Spark cluster: a standalone master and one
worker started from the pyspark wheel on loopback run the whole pipeline, and the tables
and accounts equal `reduce_corpus` exactly, as they do on `local[*]`.

The driver runs in a subprocess (`tests.pipeline.cluster_check`): a JVM holds one
SparkContext, and the test session's local one may already be up.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pyspark
import pytest

from p2panda_assets.failpoints import FAILPOINT_ENV, Failpoint

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


def spark_env(scratch: Path) -> dict[str, str]:
    """Everything binds to loopback (Spark would otherwise pick the first interface), and
    scratch space (shuffle files, fetched jars) stays under the test's own directory."""
    return {
        **os.environ,
        "SPARK_HOME": str(SPARK_HOME),
        "SPARK_LOCAL_IP": HOST,
        "SPARK_LOCAL_DIRS": str(scratch),
    }


def start_daemon(
    args: list[str], log: Path, scratch: Path, env: dict[str, str] | None = None
) -> subprocess.Popen:
    """A Spark daemon in a process group of its own (so its executors die with it);
    `env` is added to its environment, and its executors'."""
    with log.open("wb") as out:
        return subprocess.Popen(
            [str(SPARK_HOME / "bin" / "spark-class"), *args],
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


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """A standalone master and one worker (1 core, 1 GiB) on 127.0.0.1, whose executors
    have each writing task's first attempt die after its commit."""
    master_port, ui_port = free_port(), free_port()
    properties = tmp_path / "spark-defaults.conf"
    # The REST submission server would take the fixed port 6066: not needed here.
    properties.write_text("spark.master.rest.enabled false\n")
    master_log, worker_log = tmp_path / "master.log", tmp_path / "worker.log"
    work_dir, scratch = tmp_path / "work", tmp_path / "scratch"
    scratch.mkdir()
    master_url = f"spark://{HOST}:{master_port}"
    cluster = Cluster(master_url, f"http://{HOST}:{ui_port}", work_dir, scratch)
    daemons = [
        start_daemon(
            [
                "org.apache.spark.deploy.master.Master",
                *("--host", HOST, "--port", str(master_port), "--webui-port", str(ui_port)),
                *("--properties-file", str(properties)),
            ],
            master_log,
            scratch,
        )
    ]
    try:
        wait_for(lambda: cluster.state()["status"] == "ALIVE", "no master", 30, [master_log])
        daemons.append(
            start_daemon(
                [
                    "org.apache.spark.deploy.worker.Worker",
                    master_url,
                    *("--host", HOST, "--webui-port", "0", "--cores", "1", "--memory", "1g"),
                    *("--work-dir", str(work_dir), "--properties-file", str(properties)),
                ],
                worker_log,
                scratch,
                # The first attempt of every task that writes to PostgreSQL dies after
                # its commit: Spark runs it again, which must write nothing twice.
                {FAILPOINT_ENV: Failpoint.TASK_COMMITTED},
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


def run_driver(database_url: str, cluster: Cluster, home: Path) -> dict:
    """`tests.pipeline.cluster_check` in its own process group; its last line, parsed.

    Two shuffle partitions, not the default eight: the cluster has one core, and the
    pipeline runs ~190 small stages on this corpus, so task overhead is what costs."""
    env = {
        **spark_env(cluster.scratch),
        "P2PANDA_HOME": str(home),
        "SPARK_MASTER": cluster.master_url,
        "P2PANDA_SHUFFLE_PARTITIONS": "2",
    }
    driver = subprocess.Popen(
        [sys.executable, "-m", "tests.pipeline.cluster_check", database_url, cluster.master_url],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = driver.communicate(timeout=DRIVER_TIMEOUT)
    except subprocess.TimeoutExpired:
        kill_group(driver.pid, signal.SIGKILL)
        out, err = driver.communicate()
        pytest.fail(f"the driver took over {DRIVER_TIMEOUT} s\n{err[-5000:]}")
    finally:
        kill_group(driver.pid, signal.SIGKILL)  # the driver's JVM, should it outlive Python
    results = [line for line in out.splitlines() if line.startswith("{")]
    if not results:
        pytest.fail(f"the driver printed no result (exit {driver.returncode})\n{err[-5000:]}")
    return json.loads(results[-1])


def test_the_pipeline_on_a_standalone_cluster_equals_the_engine(
    cluster: Cluster, database_url: str, tmp_path: Path
) -> None:
    evidence = run_driver(database_url, cluster, tmp_path / "home")
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
