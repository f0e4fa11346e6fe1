"""`home.ensure_home`: a new home is the owner's, whatever the umask, and keeps what
another process grants on it the moment it exists (the embedded server's search
permission, `store.embedded._make_traversable`, while concurrent first starts race)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from p2panda_assets.home import NEW_HOME_MODE, ensure_home


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o777])
def test_a_new_home_is_the_owners_whatever_the_umask(tmp_path: Path, umask: int) -> None:
    before = os.umask(umask)
    try:
        home = ensure_home(tmp_path / "home")
    finally:
        os.umask(before)
    assert mode_of(home) == NEW_HOME_MODE


def test_a_new_home_keeps_a_permission_granted_as_soon_as_it_exists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    real_mkdir = Path.mkdir

    def mkdir_then_granted(self: Path, *args: object, **kwargs: object) -> None:
        real_mkdir(self, *args, **kwargs)  # type: ignore[arg-type]
        if self == home:  # another thread's `_make_traversable`, right after the mkdir
            os.chmod(self, mode_of(self) | stat.S_IXOTH)

    monkeypatch.setattr(Path, "mkdir", mkdir_then_granted)
    ensure_home(home)
    assert mode_of(home) == NEW_HOME_MODE | stat.S_IXOTH


def test_an_existing_home_keeps_its_mode(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o755)
    os.chmod(home, 0o755)
    ensure_home(home)
    assert mode_of(home) == 0o755
