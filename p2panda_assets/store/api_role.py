"""Login roles for applications (`panda api-role NAME`): they read the views of
`p2panda_api` and nothing else, so PostgREST, PostGraphile or an app never connect as
the product's own role (the superuser, on the embedded server).

The views are dropped and created again at every table swap (`views.py`), so a GRANT on
today's views would be gone at the next materialization: the role's SELECT comes from
`ALTER DEFAULT PRIVILEGES` of the role that creates them (the product's, the one this
runs as) in `p2panda_api`, besides a GRANT on the views there are now. What else a new
role may do comes from PUBLIC: PostgreSQL 15 and later no longer let PUBLIC create in
schema `public` (older servers are made to), and no table of the product or of Dagster
grants anything to PUBLIC. Temporary tables stay allowed, as PostgreSQL grants them to
every role by default: they are the session's own and gone at its end
(docs/security.md).

A role is recognised as an API role by its comment: an existing role without it (the
product's own, an admin's) is never altered.
"""

from __future__ import annotations

import re
from urllib.parse import quote, urlencode, urlunsplit

import psycopg
from psycopg import conninfo, sql

from p2panda_assets.errors import P2pandaError, Reason
from p2panda_assets.store.passwords import password_verifier
from p2panda_assets.store.views import API_SCHEMA

ROLE_COMMENT = "p2panda api role: SELECT on the views of p2panda_api, nothing else"
# Lower-case, unquoted SQL identifiers: the same name in SQL, a URL and a file name.
ROLE_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
RESERVED_NAMES = {"public", "none", "current_user", "session_user", "current_role"}
# Attributes an API role must not have, and the clause that takes each away.
_ATTRIBUTES = {
    "rolsuper": "NOSUPERUSER",
    "rolcreatedb": "NOCREATEDB",
    "rolcreaterole": "NOCREATEROLE",
    "rolreplication": "NOREPLICATION",
    "rolbypassrls": "NOBYPASSRLS",
}
_CONNINFO_KEYS_REPLACED = ("user", "password", "passfile", "dbname", "host", "port")


def check_role_name(name: str) -> None:
    """Refuse a name that is not a plain lower-case identifier, or that PostgreSQL keeps
    for itself (`pg_*`, `public`, ...)."""
    if not ROLE_NAME.fullmatch(name) or name.startswith("pg_") or name in RESERVED_NAMES:
        raise P2pandaError(
            Reason.BAD_INPUT,
            f"role name {name!r}: give 1 to 63 lower-case letters, digits and underscores,"
            " not starting with a digit or pg_",
        )


def ensure_api_role(conn: psycopg.Connection, name: str, password: str) -> bool:
    """Create the role `name` (or bring an existing API role back to what one is), with
    `password`; True if it was created. `conn` is the product's (it creates the views)."""
    check_role_name(name)
    try:
        with conn.transaction():
            created = _create_or_reset(conn, name, password)
            _grant_views(conn, name)
            _no_create_in_public(conn)
    except psycopg.errors.InsufficientPrivilege as error:
        raise P2pandaError(
            Reason.INTERNAL,
            f"the database refused to set up role {name!r} ({error.diag.message_primary});"
            " the product's role needs CREATEROLE and to own the p2panda_api views",
        ) from None
    return created


def _create_or_reset(conn: psycopg.Connection, name: str, password: str) -> bool:
    """CREATE ROLE, or ALTER the API role of that name: LOGIN, no inherited privileges,
    none of the attributes of `_ATTRIBUTES`, the new password."""
    columns = sql.SQL(", ").join(sql.Identifier(column) for column in _ATTRIBUTES)
    query = sql.SQL(
        "SELECT oid, shobj_description(oid, 'pg_authid'), {} FROM pg_roles WHERE rolname = %s"
    ).format(columns)
    row = conn.execute(query, (name,)).fetchone()
    role = sql.Identifier(name)
    verifier = sql.Literal(password_verifier(conn, name, password))
    if row is None:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN NOINHERIT PASSWORD {}").format(role, verifier))
        conn.execute(sql.SQL("COMMENT ON ROLE {} IS {}").format(role, sql.Literal(ROLE_COMMENT)))
        return True
    oid, comment, *flags = row
    if comment != ROLE_COMMENT:
        raise P2pandaError(
            Reason.BAD_INPUT,
            f"role {name!r} exists and is not an API role made by `panda api-role`;"
            " choose another name",
        )
    _refuse_memberships(conn, name, oid)
    taken = [clause for clause, flag in zip(_ATTRIBUTES.values(), flags, strict=True) if flag]
    clauses = sql.SQL(" ").join(sql.SQL(clause) for clause in ["LOGIN", "NOINHERIT", *taken])
    conn.execute(sql.SQL("ALTER ROLE {} {} PASSWORD {}").format(role, clauses, verifier))
    return False


def _refuse_memberships(conn: psycopg.Connection, name: str, oid: int) -> None:
    """An API role granted another role's privileges (by hand) is not reset silently."""
    rows = conn.execute(
        "SELECT r.rolname FROM pg_auth_members m JOIN pg_roles r ON r.oid = m.roleid"
        " WHERE m.member = %s ORDER BY 1",
        (oid,),
    ).fetchall()
    if rows:
        granted = ", ".join(role for (role,) in rows)
        raise P2pandaError(
            Reason.BAD_INPUT,
            f"role {name!r} is a member of {granted}: revoke that first (REVOKE ... FROM {name})",
        )


def _grant_views(conn: psycopg.Connection, name: str) -> None:
    """SELECT on the views of `p2panda_api` now and on those created later by this
    connection's role, USAGE on that schema, CONNECT to this database."""
    role, schema = sql.Identifier(name), sql.Identifier(API_SCHEMA)
    database = conn.execute("SELECT current_database()").fetchone()
    assert database is not None
    for statement in (
        "GRANT CONNECT ON DATABASE {database} TO {role}",
        "GRANT USAGE ON SCHEMA {schema} TO {role}",
        "GRANT SELECT ON ALL TABLES IN SCHEMA {schema} TO {role}",
        "ALTER DEFAULT PRIVILEGES IN SCHEMA {schema} GRANT SELECT ON TABLES TO {role}",
    ):
        conn.execute(
            sql.SQL(statement).format(
                database=sql.Identifier(database[0]), schema=schema, role=role
            )
        )


def _no_create_in_public(conn: psycopg.Connection) -> None:
    """Servers before PostgreSQL 15 let PUBLIC create in schema `public`: not any more."""
    row = conn.execute(
        "SELECT has_schema_privilege('public', oid, 'CREATE') FROM pg_namespace"
        " WHERE nspname = 'public'"
    ).fetchone()
    if row is not None and row[0]:
        conn.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")


def api_role_url(conn: psycopg.Connection, url: str, name: str, password: str) -> str:
    """The URL an app connects with as the role `name`: the product's server and
    database (as `conn` reached them), that user and password, the other parameters of
    `url` (sslmode, ...) kept."""
    params = {
        key: str(value)
        for key, value in conninfo.conninfo_to_dict(url).items()
        if value is not None and key not in _CONNINFO_KEYS_REPLACED
    }
    given = conninfo.conninfo_to_dict(url)
    hosts = str(given.get("host") or conn.info.host).split(",")
    ports = str(given.get("port") or conn.info.port).split(",")
    if len(ports) == 1:
        ports = ports * len(hosts)
    if hosts[0].startswith("/"):  # a Unix socket: its directory goes in the query
        params.update(host=",".join(hosts), port=",".join(ports))
        addresses = ""
    else:
        addresses = ",".join(
            f"{_url_host(host)}:{port}" for host, port in zip(hosts, ports, strict=True)
        )
    userinfo = f"{quote(name, safe='')}:{quote(password, safe='')}"
    path = "/" + quote(conn.info.dbname, safe="")
    return urlunsplit(("postgresql", f"{userinfo}@{addresses}", path, urlencode(params), ""))


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host
