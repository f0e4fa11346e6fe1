"""Messages per second of the pure reduction (the reference engine) on a generated corpus.

The corpus: 5 schemas with four versions each (fields created, a type change, a
validation with a default), 200 authors, creates, updates and deletes written at every
version, so most messages migrate forward. Printed: the whole `reduce_corpus` rate, the
signature-verification rate over the same entries (the floor every entry pays), and the
rate of everything else (decode, chain, fold, migrate, reduce, account) derived from the
two, all measured in the same run.

    .venv/bin/python bench/engine.py [--messages 100000]
"""

from __future__ import annotations

import argparse
import json
import random
import time

from p2panda_assets.engine.corpus import State, reduce_corpus
from p2panda_assets.protocol.entry import verify_entry
from p2panda_assets.testing.builder import CorpusBuilder, create_field, instances, update_field


def make_corpus(messages: int, seed: int = 7) -> CorpusBuilder:
    rnd = random.Random(seed)
    corpus = CorpusBuilder()
    owner = corpus.author(1)
    schemas = []
    for log_id in range(5):
        schema = owner.schema(100 + log_id, f"bench{log_id}")
        schema.migrate(create_field("title", "text"), create_field("count", "text"))  # 2
        schema.migrate(create_field("tags", "varchar[]", default=()))  # 3
        schema.migrate(
            update_field("count", "integer", 0),
            update_field("title", "text", "<untitled>", validation=r"^[^#\r\n].*$"),
        )  # 4
        schemas.append(schema)
    authors = [corpus.author(1000 + i) for i in range(200)]
    live: dict[tuple[int, int], list[bytes]] = {}
    while len(corpus.pairs) < messages:
        a, s = rnd.randrange(len(authors)), rnd.randrange(len(schemas))
        schema, log = schemas[s], instances(authors[a], 100 + s)
        version = rnd.choice([2, 3, 4])
        mine = live.setdefault((a, s), [])
        roll = rnd.random()
        title = rnd.choice(["hello", "two\nlines", "# heading", "ok"])
        if not mine or roll < 0.4:
            fields: dict[str, object] = {"title": title}
            fields["count"] = str(rnd.randrange(100)) if version < 4 else rnd.randrange(100)
            if version >= 3:
                fields["tags"] = ("a", "b")
            if version == 4 and title[0] in "#t":
                fields["title"] = "fine"
            mine.append(log.create(schema.ref(version), **fields))
        elif roll < 0.9:
            log.update(schema.ref(version), rnd.choice(mine), title="updated")
        else:
            log.delete(mine.pop(rnd.randrange(len(mine))), schema.ref(version))
    return corpus


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    args = parser.parse_args()
    started = time.perf_counter()
    corpus = make_corpus(args.messages)
    print(f"generated {len(corpus.pairs):,} entries in {time.perf_counter() - started:.1f} s")

    started = time.perf_counter()
    for entry, payload in corpus.pairs:
        verify_entry(entry, payload)
    verify_s = time.perf_counter() - started

    started = time.perf_counter()
    result = reduce_corpus(corpus.pairs)
    total_s = time.perf_counter() - started

    states = {state.value: 0 for state in State}
    for account in result.accounts.values():
        states[account.state.value] += 1
    n = len(corpus.pairs)
    rest_s = max(total_s - verify_s, 1e-9)
    figures = {
        "messages": n,
        "reduce_corpus_per_s": round(n / total_s),
        "verify_only_per_s": round(n / verify_s),
        "everything_but_verify_per_s": round(n / rest_s),
        "verify_share_of_time": round(verify_s / total_s, 3),
        "rows": sum(len(t.rows) for t in result.tables.values()),
        "states": states,
    }
    print(f"reduce_corpus:            {figures['reduce_corpus_per_s']:>9,} messages/s")
    print(f"verification alone:       {figures['verify_only_per_s']:>9,} messages/s")
    print(f"all but verification:     {figures['everything_but_verify_per_s']:>9,} messages/s")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
