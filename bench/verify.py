"""Decode+verify throughput of entries against raw PyNaCl verification, same run.

Signature verification is the floor of the cost: every entry must be verified once.
This prints how close decoding (varu64s, hashes, links, the payload size and hash check)
plus verification comes to raw `crypto_sign_open` over the same signed bytes.

    .venv/bin/python bench/verify.py [--entries 20000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable

import nacl.bindings

from p2panda_assets.protocol.entry import decode_entry, verify_entry
from p2panda_assets.protocol.keys import KeyPair
from p2panda_assets.protocol.log_writer import LogWriter


def make_corpus(n: int) -> list[tuple[bytes, bytes]]:
    """n entries over 50 logs of 10 authors, ~200-byte payloads, like instance logs."""
    authors = [KeyPair.from_private_key(bytes([i + 1]) * 32) for i in range(10)]
    writers = [LogWriter(authors[i % 10], i) for i in range(50)]
    corpus = []
    for i in range(n):
        payload = (f"message {i} ".encode() * 20)[:200]
        corpus.append((writers[i % 50].append(payload), payload))
    return corpus


def best_rate(run: Callable[[], None], count: int, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return count / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=20000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    corpus = make_corpus(args.entries)
    signed = [(raw[-64:] + raw[:-64], raw[1:33]) for raw, _ in corpus]
    sign_open = nacl.bindings.crypto_sign_open

    def raw_verify() -> None:
        for smessage, author in signed:
            sign_open(smessage, author)

    def decode_and_verify() -> None:
        for raw, payload in corpus:
            verify_entry(raw, payload)

    def decode_only() -> None:
        for raw, _ in corpus:
            decode_entry(raw)

    raw_rate = best_rate(raw_verify, len(corpus), args.repeat)
    full_rate = best_rate(decode_and_verify, len(corpus), args.repeat)
    decode_rate = best_rate(decode_only, len(corpus), args.repeat)
    print(f"raw PyNaCl verify:   {raw_rate:>10,.0f} entries/s")
    print(f"decode only:         {decode_rate:>10,.0f} entries/s")
    print(f"decode + verify:     {full_rate:>10,.0f} entries/s")
    print(f"ratio (decode+verify / raw verify): {full_rate / raw_rate:.3f}")
    print(
        json.dumps(
            {
                "entries": len(corpus),
                "raw_verify_per_s": round(raw_rate),
                "decode_per_s": round(decode_rate),
                "decode_verify_per_s": round(full_rate),
                "ratio": round(full_rate / raw_rate, 3),
            }
        )
    )


if __name__ == "__main__":
    main()
