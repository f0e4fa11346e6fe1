"""varu64: bamboo's variable-length unsigned 64-bit integer (not LEB128).

n < 248 is the single byte n; otherwise the byte 247+k followed by n in k big-endian
bytes (k = 1..8). Only the shortest form is valid, so every number has exactly one
encoding and entry bytes stay canonical for hashing and signing.
"""

from __future__ import annotations

from p2panda_assets.errors import P2pandaError, Reason
from p2panda_assets.protocol.ids import MAX_U64


def encode_varu64(n: int) -> bytes:
    if not 0 <= n <= MAX_U64:
        raise P2pandaError(Reason.BAD_VALUE, f"varu64 out of range: {n}")
    if n < 248:
        return bytes((n,))
    k = (n.bit_length() + 7) // 8
    return bytes((247 + k,)) + n.to_bytes(k, "big")


def decode_varu64(data: bytes, offset: int = 0) -> tuple[int, int]:
    """Read one varu64 at `offset`; return (value, offset after it).
    Rule E-VARU64 (docs/semantics.md)."""
    if offset >= len(data):
        raise P2pandaError(Reason.TRUNCATED, "bytes end where a varu64 should start")
    first = data[offset]
    if first < 248:
        return first, offset + 1
    k = first - 247
    end = offset + 1 + k
    if end > len(data):
        raise P2pandaError(Reason.TRUNCATED, f"varu64 needs {k} more bytes")
    n = int.from_bytes(data[offset + 1 : end], "big")
    # Shortest form: at least 248, and no leading zero byte in the k-byte number.
    if n < 248 or data[offset + 1] == 0:
        raise P2pandaError(Reason.NON_CANONICAL_VARU64, f"varu64 {n} is not in shortest form")
    return n, end
