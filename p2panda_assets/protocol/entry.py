"""Bamboo entries: encode, sign, decode and verify, byte-compatible with bamboo-rs-core
and p2panda-js (0.2.x with YAMF hashes, 0.3+ with YASMF hashes).

Layout, concatenated: tag, author, log id, seq num, lipmaa link (iff seq > 1 and
lipmaa(seq) != seq - 1), backlink (iff seq > 1), payload size, payload hash, signature.
The signature covers every byte before it. The entry hash, which links and instance ids
point at, is the hash of the complete entry bytes, in the log's hash algorithm.

Checks are split by what they need: `decode_entry` needs only the entry bytes,
`verify_entry` adds the signature and the payload. Chain rules (links pointing at the
right entries, forks) need the rest of the log and live in `log.py`.
"""

from __future__ import annotations

from typing import NamedTuple

from p2panda_assets.errors import P2pandaError, Reason
from p2panda_assets.protocol.hashing import (
    BY_HEADER,
    DEFAULT_ALGORITHM,
    HASH_BY_HEADER,
    HashAlgorithm,
    hash_algorithm,
)
from p2panda_assets.protocol.hashing import read_hash as _read_hash
from p2panda_assets.protocol.keys import (
    PUBLIC_KEY_SIZE,
    SIGNATURE_SIZE,
    KeyPair,
    signature_is_valid,
)
from p2panda_assets.protocol.lipmaa import has_lipmaa_link
from p2panda_assets.protocol.varu64 import decode_varu64, encode_varu64

TAG_ENTRY = 0x00
TAG_END_OF_LOG = 0x01
MAX_PAYLOAD_SIZE = 1024 * 1024


class Entry(NamedTuple):
    """A decoded entry. `raw` is the exact bytes it was decoded from.

    A named tuple, not a frozen dataclass: every entry is decoded at ingest and again at
    verification, and a frozen dataclass of these eleven fields took 3.6 us to build
    (one `object.__setattr__` per field) of the whole decode's 8.2 us."""

    end_of_log: bool
    author: bytes
    log_id: int
    seq_num: int
    lipmaa_link: bytes | None
    backlink: bytes | None
    payload_size: int
    payload_hash: bytes
    signature: bytes
    raw: bytes
    hash: bytes  # the entry hash: the hash of `raw`, in the log's algorithm

    @property
    def algorithm(self) -> HashAlgorithm:
        """The hash algorithm of the entry's log (every hash in it uses the same one)."""
        return BY_HEADER[self.payload_hash[:2]]

    @property
    def signed_bytes(self) -> bytes:
        return self.raw[:-SIGNATURE_SIZE]


def encode_unsigned(
    *,
    author: bytes,
    log_id: int,
    seq_num: int,
    payload: bytes,
    backlink: bytes | None = None,
    lipmaa_link: bytes | None = None,
    end_of_log: bool = False,
    algorithm: HashAlgorithm = DEFAULT_ALGORITHM,
) -> bytes:
    """Fields 1..8 of an entry: the bytes its signature covers."""
    if len(author) != PUBLIC_KEY_SIZE:
        raise P2pandaError(
            Reason.BAD_VALUE, f"author must have {PUBLIC_KEY_SIZE} bytes, not {len(author)}"
        )
    if seq_num < 1:
        raise P2pandaError(Reason.SEQ_ZERO, "seq num must be at least 1")
    if len(payload) > MAX_PAYLOAD_SIZE:
        raise P2pandaError(Reason.PAYLOAD_TOO_LARGE, f"payload has {len(payload)} bytes")
    _check_link("backlink", backlink, seq_num > 1, algorithm)
    _check_link("lipmaa link", lipmaa_link, has_lipmaa_link(seq_num), algorithm)
    parts = [
        bytes((TAG_END_OF_LOG if end_of_log else TAG_ENTRY,)),
        author,
        encode_varu64(log_id),
        encode_varu64(seq_num),
        lipmaa_link or b"",
        backlink or b"",
        encode_varu64(len(payload)),
        algorithm.hash(payload),
    ]
    return b"".join(parts)


def _check_link(name: str, link: bytes | None, required: bool, algorithm: HashAlgorithm) -> None:
    if required and link is None:
        raise P2pandaError(Reason.MISSING_LINK, f"this seq num requires a {name}")
    if not required and link is not None:
        raise P2pandaError(Reason.UNEXPECTED_LINK, f"this seq num has no {name}")
    if link is not None and hash_algorithm(link) is not algorithm:
        raise P2pandaError(Reason.HASH_ALGORITHM_MISMATCH, f"{name} is not a {algorithm.name}")


def sign_entry(
    key_pair: KeyPair,
    *,
    log_id: int,
    seq_num: int,
    payload: bytes,
    backlink: bytes | None = None,
    lipmaa_link: bytes | None = None,
    end_of_log: bool = False,
    algorithm: HashAlgorithm = DEFAULT_ALGORITHM,
) -> bytes:
    """The complete, signed entry bytes."""
    unsigned = encode_unsigned(
        author=key_pair.public_key,
        log_id=log_id,
        seq_num=seq_num,
        payload=payload,
        backlink=backlink,
        lipmaa_link=lipmaa_link,
        end_of_log=end_of_log,
        algorithm=algorithm,
    )
    return unsigned + key_pair.sign(unsigned)


def decode_entry(data: bytes, entry_hash: bytes | None = None) -> Entry:
    """Parse entry bytes strictly; raises `P2pandaError` and nothing else. `entry_hash`:
    the hash of `data` where the caller holds it already (the store keeps each entry's,
    computed at ingest), so that it is not computed again. Rule E-LAYOUT
    (docs/semantics.md)."""
    if not isinstance(data, bytes):
        data = bytes(data)
    if not data:
        raise P2pandaError(Reason.TRUNCATED, "empty entry")
    tag = data[0]
    if tag not in (TAG_ENTRY, TAG_END_OF_LOG):
        raise P2pandaError(Reason.UNKNOWN_TAG, f"unknown entry tag 0x{tag:02x}")
    pos = 1 + PUBLIC_KEY_SIZE
    if pos > len(data):
        raise P2pandaError(Reason.TRUNCATED, "bytes end inside the author key")
    author = data[1:pos]
    log_id, pos = _read_varu64(data, pos)
    seq_num, pos = _read_varu64(data, pos)
    if seq_num == 0:
        raise P2pandaError(Reason.SEQ_ZERO, "seq num 0: logs start at 1")
    lipmaa_link = backlink = None
    if has_lipmaa_link(seq_num):
        lipmaa_link, pos = _read_hash(data, pos)
    if seq_num > 1:
        backlink, pos = _read_hash(data, pos)
    payload_size, pos = _read_varu64(data, pos)
    if payload_size > MAX_PAYLOAD_SIZE:
        raise P2pandaError(Reason.PAYLOAD_TOO_LARGE, f"payload size {payload_size} > 1 MiB")
    payload_hash, pos = _read_hash(data, pos)
    end = pos + SIGNATURE_SIZE
    if end > len(data):
        raise P2pandaError(Reason.TRUNCATED, "bytes end inside the signature")
    if end < len(data):
        raise P2pandaError(Reason.TRAILING_BYTES, f"{len(data) - end} bytes after the signature")
    header = payload_hash[:2]
    if lipmaa_link is not None and lipmaa_link[:2] != header:
        raise _mixed_hashes("lipmaa link")
    if backlink is not None and backlink[:2] != header:
        raise _mixed_hashes("backlink")
    return Entry(  # positional, in field order: the fastest way to build one
        tag == TAG_END_OF_LOG,
        author,
        log_id,
        seq_num,
        lipmaa_link,
        backlink,
        payload_size,
        payload_hash,
        data[pos:end],
        data,
        HASH_BY_HEADER[header](data) if entry_hash is None else entry_hash,
    )


def _mixed_hashes(link: str) -> P2pandaError:
    return P2pandaError(
        Reason.HASH_ALGORITHM_MISMATCH, f"{link} and payload hash use different hashes"
    )


def _read_varu64(data: bytes, pos: int) -> tuple[int, int]:
    """`decode_varu64` with the one-byte case (most log ids, seq nums, sizes) inline."""
    if pos < len(data) and data[pos] < 248:
        return data[pos], pos + 1
    return decode_varu64(data, pos)


def check_signature(entry: Entry) -> None:
    """The ed25519 signature over the signed fields, by the entry's author.
    Rule E-SIGNATURE (docs/semantics.md)."""
    if not signature_is_valid(entry.author, entry.signed_bytes, entry.signature):
        raise P2pandaError(Reason.BAD_SIGNATURE, "the signature does not verify")


def check_payload(entry: Entry, payload: bytes | None) -> None:
    """The payload is the one the entry names: same length, same hash.
    Rule E-PAYLOAD (docs/semantics.md)."""
    if payload is None:
        raise P2pandaError(Reason.MISSING_PAYLOAD, "the entry came without its payload")
    if len(payload) != entry.payload_size:
        raise P2pandaError(
            Reason.PAYLOAD_SIZE_MISMATCH,
            f"payload has {len(payload)} bytes, the entry says {entry.payload_size}",
        )
    if HASH_BY_HEADER[entry.payload_hash[:2]](payload) != entry.payload_hash:
        raise P2pandaError(Reason.PAYLOAD_HASH_MISMATCH, "payload hash does not match")


def verify_entry(data: bytes, payload: bytes | None) -> Entry:
    """Decode, check the signature, and check the payload: everything one entry alone
    can prove. The cheap checks run first so hostile bytes cost no signature check.
    Rule E-COMPAT (docs/semantics.md)."""
    entry = decode_entry(data)
    check_payload(entry, payload)
    check_signature(entry)
    return entry
