"""The local author key: one ed25519 key under `$P2PANDA_HOME`, in a file of its own that
only the owner can read (the home itself stays passable for the embedded server)."""

from __future__ import annotations

from pathlib import Path

from p2panda_assets.errors import P2pandaError, Reason
from p2panda_assets.home import ensure_home, p2panda_home, write_private_file
from p2panda_assets.protocol.keys import KeyPair

KEY_FILE = "author.key"


def key_path(home: Path | None = None) -> Path:
    return (home or p2panda_home()) / KEY_FILE


def create_key(home: Path | None = None, *, force: bool = False) -> KeyPair:
    """Generate and store a new key; refuses to overwrite one unless `force`."""
    path = key_path(home)
    if path.exists() and not force:
        raise P2pandaError(Reason.KEY_EXISTS, f"a key is already stored at {path}")
    ensure_home(path.parent)
    key_pair = KeyPair.generate()
    # 0600 from the start: the secret is never readable by others, not even between
    # open and chmod.
    write_private_file(path, key_pair.private_key.hex() + "\n")
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
