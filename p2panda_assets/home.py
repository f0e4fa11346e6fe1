"""Where the product keeps its local state: `$P2PANDA_HOME`, default `.p2panda/` in the
working directory (keys, authoring state, the embedded PostgreSQL, Dagster's home)."""

from __future__ import annotations

import os
from pathlib import Path


def p2panda_home() -> Path:
    return Path(os.environ.get("P2PANDA_HOME") or ".p2panda").resolve()


def private_dir(path: Path) -> Path:
    """Create `path` (and parents) readable by the owner only; return it."""
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o700)
    return path
