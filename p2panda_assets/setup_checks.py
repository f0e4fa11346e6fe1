"""Is this machine ready to run the pipeline? Checked without starting Spark: Java and
the PostgreSQL JDBC driver (what Spark's launcher and JVM load), the database, Dagster's
home, the columnar store's root and a cluster's master. One function per check; each
returns a `Check`: ok and what it found, or the problem with its fix in parentheses.

`panda doctor` runs them all. Every command that starts Spark first runs `preflight`,
the two that cost nothing: without it, a missing driver jar is found by the JVM, and
the command ends in hundreds of lines of Py4J and Java stack traces instead of one
line that names the path looked at and the fix.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from p2panda_assets.errors import P2pandaError, Reason
from p2panda_assets.pipeline.spark import session

OLDEST_JAVA = 17  # Spark 4 runs on Java 17 and later
NO_JAVA = "no java in $JAVA_HOME/bin or on PATH (set JAVA_HOME, or run scripts/setup)"
DRIVER_CLASS = "org/postgresql/Driver.class"
MANIFEST = "META-INF/MANIFEST.MF"
TIMEOUT = 10  # seconds for `java -version`, a TCP connection, a login
LONGEST_DETAIL = 200  # characters of a library's message quoted in a line


@dataclass(frozen=True, slots=True)
class Check:
    """What one check found: `detail` says what is there, or, for a problem, what is
    wrong and then the fix in parentheses."""

    name: str
    ok: bool
    detail: str


# --- the cheap ones, before Spark ----------------------------------------------------


def java_missing() -> str | None:
    """Why Spark's launcher would find no `java` (`session.java_binary`), or None."""
    return NO_JAVA if session.java_binary() is None else None


def jdbc_missing() -> str | None:
    """Why Spark would not load PostgreSQL's JDBC driver from `session.jdbc_jar`, or None."""
    path = session.jdbc_jar()
    if path.is_file():
        return None
    return (
        f"the PostgreSQL JDBC driver is not at {path} (set P2PANDA_JDBC_JAR, or run scripts/setup)"
    )


def preflight() -> None:
    """Before a command starts Spark: Java and the JDBC driver are where Spark looks, or
    the command ends with one `setup` error that says which and how to fix it."""
    for problem in (java_missing(), jdbc_missing()):
        if problem is not None:
            raise P2pandaError(Reason.SETUP, problem)


# --- panda doctor's checks -------------------------------------------------------------


def java() -> Check:
    """The `java` Spark's launcher runs: there, it starts, and it is recent enough."""
    binary = session.java_binary()
    if binary is None:
        return Check("java", False, NO_JAVA)
    fix = f"set JAVA_HOME to a Java {OLDEST_JAVA} or later"
    try:
        shown = subprocess.run(
            [str(binary), "-version"], capture_output=True, text=True, timeout=TIMEOUT
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return Check("java", False, f"{binary} does not run: {one_line(str(error))} ({fix})")
    output = shown.stderr + shown.stdout
    found = re.search(r'version "([^"]+)"', output)
    if shown.returncode != 0 or found is None:
        return Check("java", False, f"{binary} does not run: {one_line(output)} ({fix})")
    version = found.group(1)
    if java_major(version) < OLDEST_JAVA:
        return Check("java", False, f"{binary} is Java {version}, too old for Spark ({fix})")
    return Check("java", True, f"{binary}, version {version}")


def java_major(version: str) -> int:
    """The feature release of a Java version string: 8 for "1.8.0_292", 17 for "17.0.15"."""
    parts = re.findall(r"\d+", version)
    if not parts:
        return 0
    return int(parts[1]) if parts[0] == "1" and len(parts) > 1 else int(parts[0])


def jdbc_driver() -> Check:
    """The jar Spark loads PostgreSQL's JDBC driver from: there, and that driver."""
    missing = jdbc_missing()
    if missing is not None:
        return Check("jdbc driver", False, missing)
    path = session.jdbc_jar()
    fix = "set P2PANDA_JDBC_JAR to the PostgreSQL JDBC driver's jar"
    try:
        with zipfile.ZipFile(path) as jar:
            names = set(jar.namelist())
            manifest = jar.read(MANIFEST).decode(errors="replace") if MANIFEST in names else ""
    except (OSError, zipfile.BadZipFile) as error:
        return Check("jdbc driver", False, f"{path} is not a readable jar: {error} ({fix})")
    if DRIVER_CLASS not in names:
        return Check("jdbc driver", False, f"{path} holds no {DRIVER_CLASS} ({fix})")
    version = re.search(r"^Implementation-Version:\s*(\S+)", manifest, re.MULTILINE)
    return Check("jdbc driver", True, f"{path}, version {version[1]}" if version else str(path))


def database() -> Check:
    """The product's PostgreSQL: `P2PANDA_DATABASE_URL`'s, else the embedded server
    (started if it is not running, as any command that needs it does). It must answer
    over TCP (Spark's JDBC driver knows no Unix socket) and take the login."""
    from p2panda_assets.store.database import (
        database_url,
        external_url,
        server_version,
        tcp_addresses,
    )
    from p2panda_assets.store.embedded import embedded_status, layout

    url = external_url()
    if url is None:
        started = not embedded_status().running
        try:
            url = database_url()
        except (P2pandaError, OSError) as error:
            text = error.message if isinstance(error, P2pandaError) else str(error)
            log = layout().log
            return Check("postgresql", False, f"{one_line(text)} (its log says why: {log})")
        which, note = "the embedded server", ", started now" if started else ""
        refused = "see docs/security.md on a lost password file"
    else:
        which, note = "P2PANDA_DATABASE_URL", ""
        refused = "fix the user, password or database in the URL"
    try:
        addresses = tcp_addresses(url)
    except P2pandaError as error:
        return Check("postgresql", False, f"{which}: {error.message}")
    if not any(answers(host, port) for host, port in addresses):
        shown = ", ".join(f"{host}:{port}" for host, port in addresses)
        fix = "start it, or fix P2PANDA_DATABASE_URL"
        return Check("postgresql", False, f"{which}: nothing answers at {shown} ({fix})")
    try:
        version = server_version(url, TIMEOUT)
    except P2pandaError as error:
        return Check("postgresql", False, f"{which} refuses: {one_line(error.message)} ({refused})")
    host, port = addresses[0]
    return Check("postgresql", True, f"{which} at {host}:{port}, PostgreSQL {version}{note}")


def dagster_home() -> Check:
    """Dagster's home, where the runs keep their logs, and its dagster.yaml as Dagster
    reads it. Missing, it is no problem: the next command writes the package's there."""
    import dagster as dg
    import yaml
    from dagster._core.instance.config import dagster_instance_config

    from p2panda_assets.defs.orchestration import dagster_home as home_of_dagster

    home = home_of_dagster()
    unwritable = cannot_write(home)
    if unwritable is not None:
        return Check("dagster home", False, f"{unwritable} (fix that, or set DAGSTER_HOME)")
    config = home / "dagster.yaml"
    if not config.is_file():
        return Check("dagster home", True, f"{home} (no dagster.yaml yet: a run writes it)")
    try:
        dagster_instance_config(str(home))
    except (dg.DagsterError, yaml.YAMLError) as error:
        fix = "fix it, or remove it: a run writes the package's"
        return Check("dagster home", False, f"Dagster refuses {config}: {complaint(error)} ({fix})")
    return Check("dagster home", True, str(config))


def warehouse() -> Check:
    """The columnar store's root (`P2PANDA_WAREHOUSE`): a local one can be written, or
    created. A Hadoop file system's URI (`s3a://`, `hdfs://`) only Spark can reach."""
    from p2panda_assets.pipeline.columnar.warehouse import warehouse_root

    root = warehouse_root()
    scheme = re.match(r"([A-Za-z][\w+.-]*)://", root)
    if scheme is not None and scheme[1] != "file":
        return Check("warehouse", True, f"{root} (not checked: Spark reaches it, not doctor)")
    path = Path(urlsplit(root).path if root.startswith("file:") else root)
    unwritable = cannot_write(path)
    if unwritable is not None:
        return Check("warehouse", False, f"{unwritable} (fix that, or set P2PANDA_WAREHOUSE)")
    return Check("warehouse", True, str(path) if path.exists() else f"{path} (not created yet)")


def spark_master() -> Check:
    """Where Spark runs (`SPARK_MASTER`): a standalone cluster's master answers on its
    port (of an HA list, one must). What the cluster does then needs Spark to see."""
    from p2panda_assets.pipeline.spark.driver_address import is_local, master_address

    master = session.spark_master()
    if is_local(master):
        return Check("spark master", True, f"{master} (in the command's own JVM)")
    if not master.startswith("spark://"):
        return Check("spark master", True, f"{master} (not checked: only spark:// is)")
    hosts = master.removeprefix("spark://").split(",")
    addresses = [master_address(f"spark://{host}") for host in hosts]
    fix = "start the master, or fix SPARK_MASTER"
    if None in addresses:
        return Check("spark master", False, f"{master} is not spark://HOST:PORT ({fix})")
    for host, port in filter(None, addresses):
        if answers(host, port):
            return Check("spark master", True, f"{master} answers at {host}:{port}")
    return Check("spark master", False, f"nothing answers at {master} ({fix})")


CHECKS: tuple[Callable[[], Check], ...] = (
    java,
    jdbc_driver,
    database,
    dagster_home,
    warehouse,
    spark_master,
)


# --- helpers ---------------------------------------------------------------------------


def answers(host: str, port: int | str) -> bool:
    """Whether something accepts a TCP connection at `host`:`port`."""
    try:
        with socket.create_connection((host, int(port)), timeout=TIMEOUT):
            return True
    except (OSError, ValueError):
        return False


def cannot_write(path: Path) -> str | None:
    """Why the product could not write into the directory `path`, or create it; None
    if it can."""
    if path.exists():
        if not path.is_dir():
            return f"{path} is not a directory"
        return None if os.access(path, os.W_OK | os.X_OK) else f"{path} is not writable"
    parent = next(p for p in path.absolute().parents if p.exists())
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        return f"{path} cannot be created in {parent}"
    return None


def complaint(error: Exception) -> str:
    """A library's error as one short line: Dagster's first config error, or the text."""
    errors = getattr(error, "errors", None)
    text = errors[0].message if errors else str(error)
    return one_line(text.split(" Expected: ")[0])


def one_line(text: str) -> str:
    """`text` on one line, at most `LONGEST_DETAIL` characters."""
    line = " ".join(text.split())
    return line if len(line) <= LONGEST_DETAIL else line[: LONGEST_DETAIL - 1] + "…"
