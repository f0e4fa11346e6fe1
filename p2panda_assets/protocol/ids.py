"""Identity: how a schema id is spelled and read, and the bounds of its parts.

A schema is one bamboo log, (author, log id); its id is `<author hex>-<log id>`, the
author as 64 lowercase hex digits, the log id in decimal without leading zeros.
"""

from __future__ import annotations

import re

from p2panda_assets.errors import P2pandaError, Reason

AUTHOR_SIZE = 32  # bytes of an ed25519 public key
MAX_U64 = 2**64 - 1  # log ids and seq nums are varu64
AUTHOR_HEX = rf"[0-9a-f]{{{2 * AUTHOR_SIZE}}}"  # an author as a schema id spells it
SCHEMA_ID = re.compile(rf"({AUTHOR_HEX})-(0|[1-9][0-9]{{0,19}})")
# A schema id as a person may type it: hex digits in either case, leading zeros allowed
# (the digits after them at most 20, as 2^64 - 1 has: Python refuses to convert 4,301).
TYPED_SCHEMA_ID = re.compile(rf"({AUTHOR_HEX})-0*([0-9]{{1,20}})", re.IGNORECASE)


def format_schema_id(author: bytes, log_id: int) -> str:
    """A schema's id: its author's key in hex, a dash, its log id. Rule S-ID (docs/semantics.md)."""
    return f"{author.hex()}-{log_id}"


def parse_schema_id(schema_id: str) -> tuple[bytes, int]:
    """(author, log id) of a schema id; `bad-value` if it is not one."""
    match = SCHEMA_ID.fullmatch(schema_id)
    if match is None or int(match[2]) > MAX_U64:
        raise P2pandaError(
            Reason.BAD_VALUE, f"{schema_id!r} is not a schema id (<64 hex digits>-<log id>)"
        )
    return bytes.fromhex(match[1]), int(match[2])


def read_typed_schema_id(text: str) -> tuple[bytes, int] | None:
    """(author, log id) of a schema id as a person typed it (`TYPED_SCHEMA_ID`), or None
    when `text` is not one (then it is a name)."""
    match = TYPED_SCHEMA_ID.fullmatch(text)
    if match is None:
        return None
    return bytes.fromhex(match[1]), int(match[2])


def checked_schema_id(schema_id: str) -> str:
    """`schema_id` itself, once it is known to be one (hex and digits: safe in paths,
    Spark expressions and SQL text)."""
    parse_schema_id(schema_id)
    return schema_id
