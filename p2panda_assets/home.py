"""Where the product keeps its local state: `$P2PANDA_HOME`, default `.p2panda/` in the
working directory (keys, authoring state, the embedded PostgreSQL, Dagster's home).

The home is shared: as root, the embedded PostgreSQL runs as its own system user, which
must pass through the home to reach its data directory (`store/embedded.py` grants it
search permission when the server starts). So nothing here changes the mode of an existing
directory; the secrets are protected file by file instead (`author.key`, the authoring
state and its lock are created 0600, see `write_private_file`).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

NEW_HOME_MODE = 0o700  # a home created here: the owner's (the server adds search, as root)
PRIVATE_FILE_MODE = 0o600


def p2panda_home() -> Path:
    return Path(os.environ.get("P2PANDA_HOME") or ".p2panda").resolve()


def ensure_home(path: Path) -> Path:
    """Create the home directory `path` (and parents) if missing; return it.

    A directory created here is owner-only; an existing one keeps its mode, since the
    embedded server's user may need to pass through it (locking it would lock the server
    out of its own data directory: PostgreSQL shuts down at its next checkpoint).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        path.mkdir(mode=NEW_HOME_MODE)
    except FileExistsError:
        return path
    # The umask can only take bits away; put back the owner's, if it took those. Only
    # add: from the moment it exists, another process or thread may grant the server's
    # user search permission (`embedded._make_traversable`), and an exact chmod here
    # took that away again while initdb ran (tests/store/test_embedded.py, 1 run in 7).
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & NEW_HOME_MODE != NEW_HOME_MODE:
        path.chmod(mode | NEW_HOME_MODE)
    return path


def write_private_file(path: Path, text: str) -> None:
    """Write `text` to `path`, readable by the owner only, from the moment it exists."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE_MODE)
    with os.fdopen(fd, "w") as file:
        file.write(text)
    path.chmod(PRIVATE_FILE_MODE)  # an existing file keeps its mode through O_CREAT
