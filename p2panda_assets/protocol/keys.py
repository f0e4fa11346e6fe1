"""ed25519 keys: authors sign entries, and everyone verifies them.

Verification calls libsodium's `crypto_sign_open` directly: it is the one unavoidable
cost per entry, and going through `VerifyKey` objects would add allocation to it.
"""

from __future__ import annotations

from dataclasses import dataclass

import nacl.bindings
import nacl.exceptions
import nacl.signing

from p2panda_assets.protocol.ids import AUTHOR_SIZE

PUBLIC_KEY_SIZE = AUTHOR_SIZE  # an author is its public key
PRIVATE_KEY_SIZE = 32
SIGNATURE_SIZE = 64


@dataclass(frozen=True, slots=True)
class KeyPair:
    """An author's ed25519 key pair (the private key is the 32-byte seed)."""

    private_key: bytes
    public_key: bytes

    @classmethod
    def generate(cls) -> KeyPair:
        return cls._from_signing_key(nacl.signing.SigningKey.generate())

    @classmethod
    def from_private_key(cls, private_key: bytes) -> KeyPair:
        if len(private_key) != PRIVATE_KEY_SIZE:
            raise ValueError(f"an ed25519 private key has 32 bytes, not {len(private_key)}")
        return cls._from_signing_key(nacl.signing.SigningKey(private_key))

    @classmethod
    def _from_signing_key(cls, key: nacl.signing.SigningKey) -> KeyPair:
        return cls(private_key=bytes(key), public_key=bytes(key.verify_key))

    def sign(self, message: bytes) -> bytes:
        """The 64-byte detached signature (deterministic, as ed25519 is)."""
        return nacl.signing.SigningKey(self.private_key).sign(message).signature


def signature_is_valid(public_key: bytes, message: bytes, signature: bytes) -> bool:
    """True iff `signature` is `public_key`'s ed25519 signature of `message`."""
    try:
        nacl.bindings.crypto_sign_open(signature + message, public_key)
    except (nacl.exceptions.BadSignatureError, nacl.exceptions.ValueError, ValueError):
        return False
    return True
