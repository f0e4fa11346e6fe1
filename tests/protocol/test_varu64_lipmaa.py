"""varu64 is canonical (shortest form only) and lipmaa follows the bamboo spec."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from p2panda_assets.errors import P2pandaError, Reason
from p2panda_assets.protocol.ids import MAX_U64
from p2panda_assets.protocol.lipmaa import has_lipmaa_link, lipmaa
from p2panda_assets.protocol.varu64 import decode_varu64, encode_varu64


@pytest.mark.parametrize(
    ("n", "encoded"),
    [
        (0, "00"),
        (247, "f7"),
        (248, "f8f8"),
        (255, "f8ff"),
        (256, "f90100"),
        (300, "f9012c"),
        (2**64 - 1, "ffffffffffffffffff"),
    ],
)
def test_varu64_encodes_the_boundaries(n: int, encoded: str) -> None:
    assert encode_varu64(n).hex() == encoded
    assert decode_varu64(bytes.fromhex(encoded)) == (n, len(encoded) // 2)


def non_canonical_forms() -> list[str]:
    """Every value written with more bytes than its shortest form needs."""
    forms = [f"f8{n:02x}" for n in range(248)]  # one-byte values in the two-byte form
    for k in range(2, 9):
        prefix = f"{247 + k:02x}"
        forms.append(prefix + "00" + "ff" * (k - 1))  # a leading zero byte
        forms.append(prefix + "00" * k)  # zero
        forms.append(prefix + "00" * (k - 1) + "01")  # one
    return forms


@pytest.mark.parametrize("form", non_canonical_forms())
def test_varu64_rejects_every_non_canonical_form(form: str) -> None:
    with pytest.raises(P2pandaError) as raised:
        decode_varu64(bytes.fromhex(form))
    assert raised.value.reason is Reason.NON_CANONICAL_VARU64


def test_varu64_truncated_is_truncated() -> None:
    for form in ["", "f8", "f901", "ff" + "00" * 7]:
        with pytest.raises(P2pandaError) as raised:
            decode_varu64(bytes.fromhex(form))
        assert raised.value.reason is Reason.TRUNCATED


def test_varu64_refuses_to_encode_out_of_range() -> None:
    for n in (-1, MAX_U64 + 1):
        with pytest.raises(P2pandaError):
            encode_varu64(n)


@given(st.integers(min_value=0, max_value=MAX_U64))
def test_varu64_round_trips(n: int) -> None:
    encoded = encode_varu64(n)
    assert decode_varu64(encoded) == (n, len(encoded))


def test_lipmaa_table_from_the_spec() -> None:
    assert [lipmaa(n) for n in range(1, 14)] == [0, 1, 2, 1, 4, 5, 6, 4, 8, 9, 10, 8, 4]
    assert lipmaa(40) == 13
    assert lipmaa(121) == 40


def test_lipmaa_link_present_iff_it_skips() -> None:
    assert not has_lipmaa_link(1)
    assert not has_lipmaa_link(2)
    assert has_lipmaa_link(4)
    assert [n for n in range(1, 14) if has_lipmaa_link(n)] == [4, 8, 12, 13]


@given(st.integers(min_value=2, max_value=10**12))
def test_lipmaa_points_strictly_backwards(n: int) -> None:
    assert 0 < lipmaa(n) < n
