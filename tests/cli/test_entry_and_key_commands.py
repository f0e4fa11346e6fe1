"""`panda entry decode` and `panda key new` as rule P-ENTRY-JSON says."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from p2panda_assets.cli.main import main
from p2panda_assets.protocol.keys import KeyPair

ENTRY_KEYS = {
    "author",
    "log_id",
    "seq_num",
    "lipmaa_link",
    "backlink",
    "payload_size",
    "payload_hash",
    "signature",
    "hash",
}


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_entry_decode_prints_the_spec_json(capsys, vectors: dict) -> None:
    record = vectors["v021"]["logs"][0]["entries"][3]  # seq 4: has a lipmaa link
    code, out, err = run(capsys, "entry", "decode", record["entry"])
    assert (code, err) == (0, "")
    decoded = json.loads(out)
    assert set(decoded) == ENTRY_KEYS
    assert decoded["hash"] == record["entryHash"]
    assert decoded["seq_num"] == 4 and decoded["log_id"] == 1
    assert decoded["lipmaa_link"] == record["decoded"]["entryHashSkiplink"]
    assert decoded["backlink"] == record["decoded"]["entryHashBacklink"]
    assert decoded["payload_hash"] == record["messageHash"]


def test_entry_decode_gives_null_for_absent_links(capsys, vectors: dict) -> None:
    record = vectors["v081"]["logs"][0]["entries"][0]
    code, out, _ = run(capsys, "entry", "decode", record["entry"])
    decoded = json.loads(out)
    assert code == 0
    assert decoded["lipmaa_link"] is None and decoded["backlink"] is None
    assert decoded["payload_size"] == 178


def test_entry_decode_reads_stdin(monkeypatch, capsys, vectors: dict) -> None:
    record = vectors["v081"]["logs"][2]["entries"][2]
    monkeypatch.setattr(sys, "stdin", __import__("io").StringIO(record["entry"] + "\n"))
    code, out, _ = run(capsys, "entry", "decode")
    assert code == 0 and json.loads(out)["log_id"] == 300


def test_entry_decode_rejects_a_bad_signature(capsys, vectors: dict) -> None:
    raw = bytearray.fromhex(vectors["v081"]["logs"][0]["entries"][0]["entry"])
    raw[-1] ^= 1
    code, out, err = run(capsys, "entry", "decode", raw.hex())
    assert code != 0 and out == ""
    assert err.startswith("error: bad-signature: ")


def test_entry_decode_rejects_non_hex(capsys) -> None:
    code, _, err = run(capsys, "entry", "decode", "zz")
    assert code != 0 and err.startswith("error: bad-hex: ")


def test_key_new_stores_an_owner_only_key(capsys, p2panda_home: Path) -> None:
    code, out, _ = run(capsys, "key", "new")
    assert code == 0
    key_file = p2panda_home / "author.key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(p2panda_home.stat().st_mode) == 0o700
    key_pair = KeyPair.from_private_key(bytes.fromhex(key_file.read_text()))
    assert out.strip() == key_pair.public_key.hex()


def test_key_new_refuses_to_overwrite(capsys, p2panda_home: Path) -> None:
    run(capsys, "key", "new")
    code, _, err = run(capsys, "key", "new")
    assert code != 0 and err.startswith("error: key-exists: ")
    assert run(capsys, "key", "new", "--force")[0] == 0


def test_the_installed_panda_command_reports_errors_on_stderr(tmp_path: Path) -> None:
    panda = Path(sys.executable).parent / "panda"
    result = subprocess.run(
        [str(panda), "entry", "decode", "00"], capture_output=True, text=True, cwd=tmp_path
    )
    assert result.returncode != 0
    assert result.stdout == ""
    assert result.stderr.startswith("error: truncated: ")
