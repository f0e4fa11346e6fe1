"""Random corpora for property tests: several schemas (relations, reverts, invalid
migrations), several authors' instance logs (creates, updates, deletes at random
versions, some invalid, some from the future), and hostile entries (forks, bad
signatures, garbage payloads, duplicates)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from hypothesis import strategies as st

from p2panda_assets.protocol.log_writer import LogWriter
from p2panda_assets.testing.builder import (
    Author,
    CorpusBuilder,
    SchemaAuthor,
    create_field,
    instances,
    remove_field,
    update_field,
)
from p2panda_assets.tuning import DEFAULTS, PipelineTuning, tuning

FIELD_NAMES = ["title", "count", "tags", "note"]
TYPES = ["text", "varchar", "integer", "text[]", "boolean"]
TEXTS = ["a", "hello", "two\nlines", "#hash", "42", "", "ünïcode"]


def value_for(type_: str) -> st.SearchStrategy[object]:
    scalar = {
        "text": st.sampled_from(TEXTS),
        "varchar": st.sampled_from(TEXTS),
        "integer": st.integers(-5, 5),
        "boolean": st.booleans(),
    }
    if type_.endswith("[]"):
        return st.lists(scalar[type_[:-2]], max_size=2).map(tuple)
    return st.one_of(scalar[type_], st.none())


@dataclass
class GeneratedSchema:
    schema: SchemaAuthor
    lenses: dict[int, dict[str, str]] = field(default_factory=dict)  # version -> name -> type


@st.composite
def schema_history(
    draw: st.DrawFn,
    corpus: CorpusBuilder,
    owner: Author,
    log_id: int,
    others: list[GeneratedSchema],
) -> GeneratedSchema:
    gen = GeneratedSchema(owner.schema(log_id, f"s{log_id}"))
    lens: dict[str, str] = {}
    gen.lenses[1] = dict(lens)
    for _ in range(draw(st.integers(1, 4))):
        step = draw(st.sampled_from(["create", "create", "update", "remove", "revert", "relation"]))
        name = draw(st.sampled_from(FIELD_NAMES))
        type_ = draw(st.sampled_from(TYPES))
        if step == "relation" and others:
            target = draw(st.sampled_from(others)).schema
            rel_name = f"to_{target.log_id}"
            if rel_name in lens:
                continue
            cascade = draw(st.booleans())
            gen.schema.migrate(
                create_field(rel_name, "relation", schema=target.log_ref, cascade=cascade)
            )
            lens[rel_name] = "relation"
        elif step == "create" and name not in lens:
            gen.schema.migrate(create_field(name, type_))
            lens[name] = type_
        elif step == "update" and name in lens and lens[name] != "relation":
            default = draw(value_for(type_))
            validation = draw(st.sampled_from([None, r"^[^#\r\n].*$"]))
            if (
                validation
                and type_ in ("text", "varchar")
                and isinstance(default, str)
                and (not default or default[0] in "#\n")
            ):
                default = "ok"
            gen.schema.migrate(update_field(name, type_, default, validation=validation))
            lens[name] = type_
        elif step == "remove" and name in lens:
            gen.schema.migrate(remove_field(name))
            del lens[name]
        elif step == "revert" and gen.schema.version > 1:
            target = draw(st.integers(1, gen.schema.version))
            gen.schema.revert(target)  # target == version: invalid, freezes the schema
            lens = dict(gen.lenses.get(target, lens))
        else:
            continue
        gen.lenses[gen.schema.version] = dict(lens)
    return gen


@st.composite
def corpora(draw: st.DrawFn, max_schemas: int = 3) -> CorpusBuilder:
    corpus = CorpusBuilder()
    schema_owner = corpus.author(1)
    schemas: list[GeneratedSchema] = []
    for index in range(draw(st.integers(1, max_schemas))):
        schemas.append(draw(schema_history(corpus, schema_owner, 10 + index, list(schemas))))
    authors = [corpus.author(2 + i) for i in range(draw(st.integers(1, 3)))]
    created: list[tuple[Author, GeneratedSchema, bytes]] = []
    for _ in range(draw(st.integers(0, 12))):
        author = draw(st.sampled_from(authors))
        gen = draw(st.sampled_from(schemas))
        log = instances(author, gen.schema.log_id)
        version = draw(st.integers(1, gen.schema.version + 1))  # +1: from the future
        lens = gen.lenses.get(version) or gen.lenses[max(v for v in gen.lenses if v <= version)]
        fields = {}
        for name, type_ in lens.items():
            if draw(st.booleans()):
                if type_ == "relation":
                    ids = [i for _, g, i in created if f"to_{g.schema.log_id}" == name]
                    if ids:
                        fields[name] = draw(st.sampled_from(ids))
                else:
                    fields[name] = draw(value_for(type_))
        action = draw(st.sampled_from(["create", "create", "update", "delete", "garbage"]))
        mine = [c for c in created if c[1] is gen and (draw(st.booleans()) or c[0] is author)]
        ref = gen.schema.ref(version)
        if action == "create" or not mine:
            created.append((author, gen, log.create(ref, **fields)))
        elif action == "update" and fields:
            log.update(ref, draw(st.sampled_from(mine))[2], **fields)
        elif action == "delete":
            log.delete(draw(st.sampled_from(mine))[2], ref if draw(st.booleans()) else None)
        elif action == "garbage":
            log.raw(draw(st.sampled_from([b"\xff", b"\xa1\x61k\x01", b"\x80"])))
    _add_hostile(draw, corpus, authors)
    return corpus


def _add_hostile(draw: st.DrawFn, corpus: CorpusBuilder, authors: list[Author]) -> None:
    if not corpus.pairs:
        return
    if draw(st.booleans()):  # a byte flipped: bad signature, bad hash or undecodable
        index = draw(st.integers(0, len(corpus.pairs) - 1))
        entry, payload = corpus.pairs[index]
        position = draw(st.integers(0, len(entry) - 1))
        flipped = bytearray(entry)
        flipped[position] ^= 0xFF
        corpus.pairs.append((bytes(flipped), payload))
    if draw(st.booleans()):  # a fork: a second entry at a taken seq of some log
        author = draw(st.sampled_from(authors))
        if author.logs:
            log_id = draw(st.sampled_from(sorted(author.logs)))
            writer = author.logs[log_id]
            cut = draw(st.integers(0, writer.next_seq - 1))
            fork = LogWriter(
                author.key_pair, log_id, hashes={s: h for s, h in writer.hashes.items() if s <= cut}
            )
            payload = b"\xa0"
            corpus.pairs.append((fork.append(payload), payload))
    if draw(st.booleans()):  # duplicates
        corpus.pairs.append(draw(st.sampled_from(corpus.pairs)))


# The plans the pipeline picks by size, each drawn both ways (0: never the small-data
# plan; the default: these small corpora always take it). What each switches between:
SIZE_SWITCHES = (
    "verify_in_driver",  # verification in the driver or in Spark partitions
    "broadcast_held",  # refused entries taken out by a broadcast or a shuffled join
    "collect_chain_entries",  # logs chained collected to Spark's driver or in partitions
    "collect_cascade_rows",  # a whole build's cascades settled collected or in Spark joins
    "literal_keys",  # an increment's instances found by literals or by a join
    "compact_batches",  # verified batches compacted at every whole index step, or never
)


def _tuned(driver_path: int, indexed: bool, **switches: int) -> PipelineTuning:
    layout = {"layer_group_rows": 2, "key_index_messages": 0} if indexed else {}
    return replace(
        tuning(),
        driver_path_entries=driver_path,
        driver_path_messages=driver_path,
        **layout,
        **switches,
    )


def tunings() -> st.SearchStrategy[PipelineTuning]:
    """A tuning that sends a small corpus down either of each pair of paths: every
    size switch both ways, the driver path (pyarrow, no Spark job) on or off, and the
    layers in row groups of two messages, each with its key index (`key_index`), or as
    a small store's: a row group a file, no index."""
    switches = {name: st.sampled_from([0, getattr(DEFAULTS, name)]) for name in SIZE_SWITCHES}
    return st.builds(
        _tuned,
        driver_path=st.sampled_from([-1, 1_000_000]),
        indexed=st.booleans(),
        **switches,
    )
