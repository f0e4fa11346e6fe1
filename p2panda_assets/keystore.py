"""The local author key: one ed25519 key under `$P2PANDA_HOME`, owner-only permissions."""

from __future__ import annotations

import os
from pathlib import Path

from p2panda_assets.errors import P2pandaError, Reason
from p2panda_assets.home import p2panda_home, private_dir
from p2panda_assets.protocol.keys import KeyPair

KEY_FILE = "author.key"


def key_path(home: Path | None = None) -> Path:
    return (home or p2panda_home()) / KEY_FILE


def create_key(home: Path | None = None, *, force: bool = False) -> KeyPair:
    """Generate and store a new key; refuses to overwrite one unless `force`."""
    path = key_path(home)
    if path.exists() and not force:
        raise P2pandaError(Reason.KEY_EXISTS, f"a key is already stored at {path}")
    private_dir(path.parent)
    key_pair = KeyPair.generate()
    # Create with 0600 from the start: the secret is never readable by others, not even
    # between open and chmod.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as file:
        file.write(key_pair.private_key.hex() + "\n")
    path.chmod(0o600)
    return key_pair


def load_key(home: Path | None = None) -> KeyPair:
    path = key_path(home)
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        raise P2pandaError(Reason.NO_KEY, f"no key at {path}: run `panda key new`") from None
    try:
        return KeyPair.from_private_key(bytes.fromhex(text))
    except ValueError:
        raise P2pandaError(Reason.BAD_INPUT, f"{path} does not hold a 32-byte hex key") from None
