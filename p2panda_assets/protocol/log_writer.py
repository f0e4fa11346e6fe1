"""Appending to one's own log: the next seq num, its backlink and its lipmaa link."""

from __future__ import annotations

from p2panda_assets.protocol.entry import sign_entry
from p2panda_assets.protocol.hashing import DEFAULT_ALGORITHM, HashAlgorithm
from p2panda_assets.protocol.keys import KeyPair
from p2panda_assets.protocol.lipmaa import has_lipmaa_link, lipmaa


class LogWriter:
    """Signs payloads as consecutive entries of (key_pair's author, log_id).

    `hashes` (seq -> entry hash of what is already published) lets a writer resume a
    log; every earlier hash is kept because any of them may be a later lipmaa target.
    """

    def __init__(
        self,
        key_pair: KeyPair,
        log_id: int,
        *,
        algorithm: HashAlgorithm = DEFAULT_ALGORITHM,
        hashes: dict[int, bytes] | None = None,
    ) -> None:
        self.key_pair = key_pair
        self.log_id = log_id
        self.algorithm = algorithm
        self.hashes: dict[int, bytes] = dict(hashes or {})

    @property
    def next_seq(self) -> int:
        return len(self.hashes) + 1

    def append(self, payload: bytes, *, end_of_log: bool = False) -> bytes:
        """Sign `payload` as the next entry; return the entry bytes."""
        seq = self.next_seq
        raw = sign_entry(
            self.key_pair,
            log_id=self.log_id,
            seq_num=seq,
            payload=payload,
            backlink=self.hashes.get(seq - 1),
            lipmaa_link=self.hashes[lipmaa(seq)] if has_lipmaa_link(seq) else None,
            end_of_log=end_of_log,
            algorithm=self.algorithm,
        )
        self.hashes[seq] = self.algorithm.hash(raw)
        return raw
