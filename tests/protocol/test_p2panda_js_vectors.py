"""All 46 entries made by the real p2panda-js (0.8.1 YASMF, 0.2.1 YAMF) decode, verify,
match the package's own decoding, chain as logs, and re-sign byte-identically."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from p2panda_assets.protocol.entry import sign_entry, verify_entry
from p2panda_assets.protocol.hashing import HashAlgorithm
from p2panda_assets.protocol.keys import KeyPair
from p2panda_assets.protocol.lipmaa import lipmaa
from p2panda_assets.protocol.log import validate_log

PAYLOAD_KEY = {"v081": "operation", "v021": "message"}
ALGORITHM = {"v081": HashAlgorithm.YASMF, "v021": HashAlgorithm.YAMF}


def all_records(vectors: dict) -> Iterator[tuple[str, dict]]:
    for era in PAYLOAD_KEY:
        for log in vectors[era]["logs"]:
            for record in log["entries"]:
                yield era, record


def test_there_are_46_vectors(vectors: dict) -> None:
    assert len(list(all_records(vectors))) == 46


def test_every_vector_decodes_verifies_and_hashes_as_p2panda_js(vectors: dict) -> None:
    for era, record in all_records(vectors):
        payload = bytes.fromhex(record[PAYLOAD_KEY[era]])
        entry = verify_entry(bytes.fromhex(record["entry"]), payload)
        assert entry.hash.hex() == record["entryHash"]
        assert entry.algorithm is ALGORITHM[era]
        assert entry.log_id == record["logId"]
        assert entry.seq_num == record["seqNum"]
        assert (entry.lipmaa_link is not None) == record["skiplinkIncluded"]
        assert entry.author.hex() == vectors[era]["publicKey"]
        assert entry.payload_size == len(payload)


def test_v081_fields_match_the_packages_own_decoding(vectors: dict) -> None:
    for era, record in all_records(vectors):
        if era != "v081":
            continue
        entry = verify_entry(bytes.fromhex(record["entry"]), bytes.fromhex(record["operation"]))
        decoded = record["decoded"]
        assert entry.author.hex() == decoded["publicKey"]
        assert str(entry.log_id) == decoded["logId"]
        assert str(entry.seq_num) == decoded["seqNum"]
        assert str(entry.payload_size) == decoded["payloadSize"]
        assert entry.payload_hash.hex() == decoded["payloadHash"]
        assert entry.signature.hex() == decoded["signature"]
        assert (entry.backlink.hex() if entry.backlink else None) == decoded.get("backlink")
        assert (entry.lipmaa_link.hex() if entry.lipmaa_link else None) == decoded.get("skiplink")


def test_v021_fields_match_the_packages_own_decoding(vectors: dict) -> None:
    for era, record in all_records(vectors):
        if era != "v021":
            continue
        entry = verify_entry(bytes.fromhex(record["entry"]), bytes.fromhex(record["message"]))
        decoded = record["decoded"]
        assert entry.payload_hash.hex() == record["messageHash"]
        assert entry.log_id == decoded["logId"]
        assert entry.seq_num == decoded["seqNum"]
        backlink = entry.backlink.hex() if entry.backlink else None
        lipmaa_link = entry.lipmaa_link.hex() if entry.lipmaa_link else None
        assert backlink == decoded["entryHashBacklink"]
        assert lipmaa_link == decoded["entryHashSkiplink"]


def test_every_vector_re_signs_byte_identically(vectors: dict) -> None:
    for era, record in all_records(vectors):
        key_pair = KeyPair.from_private_key(bytes.fromhex(vectors[era]["privateKey"]))
        assert key_pair.public_key.hex() == vectors[era]["publicKey"]
        payload = bytes.fromhex(record[PAYLOAD_KEY[era]])
        entry = verify_entry(bytes.fromhex(record["entry"]), payload)
        resigned = sign_entry(
            key_pair,
            log_id=entry.log_id,
            seq_num=entry.seq_num,
            payload=payload,
            backlink=entry.backlink,
            lipmaa_link=entry.lipmaa_link,
            algorithm=ALGORITHM[era],
        )
        assert resigned.hex() == record["entry"]


@pytest.mark.parametrize("era", list(PAYLOAD_KEY))
def test_every_vector_log_chains_completely(vectors: dict, era: str) -> None:
    for log in vectors[era]["logs"]:
        entries = [
            verify_entry(bytes.fromhex(r["entry"]), bytes.fromhex(r[PAYLOAD_KEY[era]]))
            for r in reversed(log["entries"])  # arrival order must not matter
        ]
        verdict = validate_log(entries)
        assert [e.seq_num for e in verdict.accepted] == list(range(1, len(entries) + 1))
        assert not verdict.rejected
        assert not verdict.pending


def test_lipmaa_matches_the_vectors_for_1_to_40(vectors: dict) -> None:
    assert [lipmaa(n) for n in range(1, 41)] == vectors["lipmaa_1_to_40"]


def test_yasmf_hash_matches_p2panda_js_generate_hash(vectors: dict) -> None:
    era = vectors["v081"]
    assert HashAlgorithm.YASMF.hash(bytes.fromhex("aabbcc")).hex() == era["generateHash_aabbcc"]
    assert HashAlgorithm.YASMF.hash(bytes.fromhex("010203")).hex() == era["generateHash_010203"]
