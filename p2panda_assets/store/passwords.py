"""Passwords of the product's database roles: the embedded server's superuser
(`embedded.py`) and the API roles (`api_role.py`). A module of its own, which imports
nothing of the product's, so that both can use it without an import circle."""

from __future__ import annotations

import secrets

import psycopg

PASSWORD_BYTES = 32  # secrets.token_urlsafe: 43 characters a URL carries as they are


def new_password() -> str:
    """A random password, safe in a URL's user info without percent-encoding."""
    return secrets.token_urlsafe(PASSWORD_BYTES)


def password_verifier(conn: psycopg.Connection, role: str, password: str) -> str:
    """The SCRAM-SHA-256 verifier of `role`'s `password`, computed by libpq on our side:
    `ALTER ROLE ... PASSWORD` with it never sends the password itself to the server,
    where a statement log or pg_stat_activity could show it."""
    verifier = conn.pgconn.encrypt_password(password.encode(), role.encode(), b"scram-sha-256")
    return verifier.decode()
