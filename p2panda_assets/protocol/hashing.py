"""Self-describing hashes (yamf-hash): varu64 algorithm id, varu64 length, digest.

Two forms are read: YASMF (`00 20` + blake3-256, p2panda-js 0.3+, the default the
product writes) and YAMF (`00 40` + blake2b-512, bamboo-rs-core and p2panda-js 0.2).
Both carry algorithm id 0; the digest length tells them apart.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from enum import Enum

import blake3

from p2panda_assets.errors import P2pandaError, Reason
from p2panda_assets.protocol.varu64 import decode_varu64


class HashAlgorithm(Enum):
    """A hash form, by its two-byte header."""

    YASMF = b"\x00\x20"  # blake3-256
    YAMF = b"\x00\x40"  # blake2b-512

    @property
    def digest_size(self) -> int:
        return 32 if self is HashAlgorithm.YASMF else 64

    def hash(self, data: bytes) -> bytes:
        """The complete self-describing hash of `data`."""
        return HASH_BY_HEADER[self.value](data)


def _yasmf(data: bytes) -> bytes:
    return b"\x00\x20" + blake3.blake3(data).digest()


def _yamf(data: bytes) -> bytes:
    return b"\x00\x40" + hashlib.blake2b(data, digest_size=64).digest()


# The complete hash of some bytes, by the two-byte header of its form. Entries and
# payloads are hashed twice each (ingest, verification): a plain function per form
# costs no enum attribute lookups on the way.
HASH_BY_HEADER: dict[bytes, Callable[[bytes], bytes]] = {
    HashAlgorithm.YASMF.value: _yasmf,
    HashAlgorithm.YAMF.value: _yamf,
}


DEFAULT_ALGORITHM = HashAlgorithm.YASMF
_BY_LENGTH = {a.digest_size: a for a in HashAlgorithm}
BY_HEADER = {a.value: a for a in HashAlgorithm}
_SIZE_BY_HEADER = {a.value: 2 + a.digest_size for a in HashAlgorithm}


def read_hash(data: bytes, offset: int = 0) -> tuple[bytes, int]:
    """Read one hash at `offset`; return (the whole hash bytes, offset after it).
    Rule E-HASH (docs/semantics.md)."""
    # Fast path: a valid hash starts with one of exactly two headers.
    size = _SIZE_BY_HEADER.get(data[offset : offset + 2])
    if size is not None and offset + size <= len(data):
        return data[offset : offset + size], offset + size
    algorithm_id, pos = decode_varu64(data, offset)
    length, pos = decode_varu64(data, pos)
    if algorithm_id != 0 or length not in _BY_LENGTH:
        raise P2pandaError(
            Reason.BAD_HASH, f"unknown hash form: algorithm {algorithm_id}, length {length}"
        )
    end = pos + length
    if end > len(data):
        raise P2pandaError(Reason.TRUNCATED, "bytes end inside a hash digest")
    return data[offset:end], end


def hash_algorithm(hash_bytes: bytes) -> HashAlgorithm:
    """The algorithm of a complete, well-formed hash (raises `bad-hash` otherwise)."""
    try:
        whole, end = read_hash(hash_bytes)
    except P2pandaError as error:
        raise P2pandaError(Reason.BAD_HASH, error.message) from None
    if end != len(hash_bytes):
        raise P2pandaError(Reason.BAD_HASH, "bytes after the hash digest")
    return _BY_LENGTH[len(whole) - 2]


def is_hash(value: object) -> bool:
    """True for bytes that are exactly one well-formed YASMF or YAMF hash."""
    if not isinstance(value, bytes):
        return False
    try:
        hash_algorithm(value)
    except P2pandaError:
        return False
    return True
