"""Which PostgreSQL the product uses, connections to it, its tables, and the same
database described for Spark's JDBC reader and writer.

`P2PANDA_DATABASE_URL` names the database; unset, the embedded server under
`$P2PANDA_HOME` is used (and started if it is not running).
"""

from __future__ import annotations

import getpass
import hashlib
import os
from importlib import resources
from urllib.parse import quote

import psycopg
from psycopg import conninfo

from p2panda_assets.errors import P2pandaError, Reason

DATABASE_URL_ENV = "P2PANDA_DATABASE_URL"
JDBC_DRIVER = "org.postgresql.Driver"
DEFAULT_PORT = 5432
# Serializes concurrent `ensure_schema` calls: CREATE ... IF NOT EXISTS is not safe
# against itself in two sessions at once (both may try to create the same type).
_DDL_LOCK_KEY = 0x70327061_6E646101  # "p2panda" + 1, an arbitrary bigint
_DDL_MARK = "p2panda ddl "  # + the DDL's sha256, as the comment on schema p2panda


def external_url() -> str | None:
    """`P2PANDA_DATABASE_URL`, the server used instead of the embedded one; None if unset."""
    return os.environ.get(DATABASE_URL_ENV, "").strip() or None


def database_url() -> str:
    """`P2PANDA_DATABASE_URL`, else the embedded server's URL (starting it if needed)."""
    url = external_url()
    if url:
        return url
    from p2panda_assets.store.embedded import EmbeddedError, ensure_embedded

    try:
        return ensure_embedded()
    except EmbeddedError as error:
        raise P2pandaError(Reason.DATABASE_UNAVAILABLE, f"embedded PostgreSQL: {error}") from None


def connect(url: str | None = None, *, autocommit: bool = False) -> psycopg.Connection:
    """A psycopg 3 connection to `url` (default: `database_url()`)."""
    try:
        return psycopg.connect(url or database_url(), autocommit=autocommit)
    except psycopg.OperationalError as error:
        raise P2pandaError(Reason.DATABASE_UNAVAILABLE, str(error).strip()) from None


def server_version(url: str, timeout: int = 10) -> str:
    """The version of the server at `url`, as it reports it at login (`panda doctor`): a
    server that answers but refuses the login is `database-unavailable` too. The timeout
    (seconds) bounds a server that takes the connection and never answers."""
    try:
        with psycopg.connect(url, autocommit=True, connect_timeout=timeout) as conn:
            return conn.info.parameter_status("server_version") or "unknown"
    except psycopg.OperationalError as error:
        raise P2pandaError(Reason.DATABASE_UNAVAILABLE, str(error).strip()) from None


def ddl() -> str:
    """The table design (`ddl.sql`, then the entry store's trigger `notify.sql`, shipped
    as package data)."""
    files = resources.files("p2panda_assets.store")
    return "\n".join(files.joinpath(f).read_text("utf-8") for f in ("ddl.sql", "notify.sql"))


def ensure_schema(conn: psycopg.Connection) -> None:
    """Create the product's schemas and tables where missing; idempotent and cheap.

    Every command calls it, so the common case (nothing to do) is one query: the hash of
    the applied DDL is kept as the comment on schema `p2panda`. CREATE INDEX IF NOT
    EXISTS would otherwise take a share lock on the entry store every time.
    """
    text = ddl()
    mark = _DDL_MARK + hashlib.sha256(text.encode()).hexdigest()
    with conn.transaction():  # also ends the transaction the check would leave open
        if _applied_mark(conn) == mark:
            return
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_DDL_LOCK_KEY,))
        if _applied_mark(conn) != mark:
            conn.execute(text)  # trusted, multi-statement
            conn.execute(f"COMMENT ON SCHEMA p2panda IS '{mark}'")


def _applied_mark(conn: psycopg.Connection) -> str | None:
    row = conn.execute(
        "SELECT obj_description(oid, 'pg_namespace') FROM pg_namespace WHERE nspname = 'p2panda'"
    ).fetchone()
    return None if row is None else row[0]


def jdbc_options(url: str) -> dict[str, str]:
    """Spark's JDBC options (`url`, `user`, `password`, `driver`) for a postgresql:// URL.

    libpq's defaults apply where the URL is silent (port 5432, user = the OS user,
    database = the user); `sslmode` is passed on, since the JDBC driver knows it too. A
    URL that reaches the server only through a Unix socket cannot be used: JDBC is TCP.
    """
    params = _parse(url)
    user = params.get("user") or getpass.getuser()
    addresses = ",".join(f"{_jdbc_host(host)}:{port}" for host, port in tcp_addresses(url))
    dbname = params.get("dbname") or user
    options = {
        "url": f"jdbc:postgresql://{addresses}/{quote(dbname, safe='')}",
        "user": user,
        "password": params.get("password", ""),
        "driver": JDBC_DRIVER,
    }
    if params.get("sslmode"):
        options["sslmode"] = params["sslmode"]
    return options


def tcp_addresses(url: str) -> list[tuple[str, str]]:
    """The hosts and ports a postgresql:// URL names (port 5432 where it is silent), as
    Spark's JDBC driver reaches them: over TCP, so a Unix socket is `bad-input`."""
    params = _parse(url)
    host = params.get("host") or params.get("hostaddr", "")
    if not host or any(part.startswith("/") or part.startswith("@") for part in host.split(",")):
        raise P2pandaError(
            Reason.BAD_INPUT,
            "the database URL names no TCP host (a Unix socket cannot be used by Spark's "
            "JDBC driver); give one, as in postgresql://user@host:5432/dbname",
        )
    ports = (params.get("port") or str(DEFAULT_PORT)).split(",")
    hosts = host.split(",")
    if len(ports) == 1:
        ports = ports * len(hosts)
    if len(ports) != len(hosts):
        raise P2pandaError(Reason.BAD_INPUT, "the database URL has more ports than hosts")
    return [(h, p or str(DEFAULT_PORT)) for h, p in zip(hosts, ports, strict=True)]


def _parse(url: str) -> dict[str, str]:
    if not url.startswith(("postgresql://", "postgres://")):
        raise P2pandaError(
            Reason.BAD_INPUT, "the database URL must start with postgresql:// or postgres://"
        )
    try:
        params = conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError as error:
        raise P2pandaError(Reason.BAD_INPUT, f"the database URL is malformed: {error}") from None
    return {key: str(value) for key, value in params.items() if value is not None}


def _jdbc_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host
