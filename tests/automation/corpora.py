"""Corpora of the automation tests, built in code (`testing.builder`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from p2panda_assets.testing.builder import (
    CorpusBuilder,
    InstanceAuthor,
    SchemaAuthor,
    create_field,
    instances,
)


@dataclass
class Corpus:
    """A corpus being published: `fresh()` gives the pairs not handed out yet."""

    builder: CorpusBuilder = field(default_factory=CorpusBuilder)
    handed_out: int = 0

    def fresh(self) -> list[tuple[bytes, bytes]]:
        pairs = self.builder.pairs[self.handed_out :]
        self.handed_out = len(self.builder.pairs)
        return pairs


@dataclass
class Graph(Corpus):
    """profile <- mail (cascade) <- digest, and an unrelated tag schema; one instance each."""

    schemas: dict[str, SchemaAuthor] = field(default_factory=dict)
    logs: dict[str, InstanceAuthor] = field(default_factory=dict)

    def id(self, name: str) -> str:
        return self.schemas[name].schema_id


def relation_graph() -> Graph:
    graph = Graph()
    owner = graph.builder.author(1)
    profile = owner.schema(20, "profile")
    profile.migrate(create_field("name", "varchar"))
    mail = owner.schema(21, "mail")
    mail.migrate(
        create_field("subject", "text"),
        create_field("to", "relation", schema=profile.log_ref, cascade=True),
    )
    digest = owner.schema(22, "digest")
    digest.migrate(create_field("mail", "relation", schema=mail.log_ref))
    tag = owner.schema(23, "tag")
    tag.migrate(create_field("label", "text"))
    graph.schemas = {"profile": profile, "mail": mail, "digest": digest, "tag": tag}
    people = instances(graph.builder.author(2), 1)
    letters = instances(graph.builder.author(3), 1)
    digests = instances(graph.builder.author(3), 2)
    labels = instances(graph.builder.author(4), 1)
    graph.logs = {"profile": people, "mail": letters, "digest": digests, "tag": labels}
    panda = people.create(profile.ref(), name="panda")
    letter = letters.create(mail.ref(), subject="hi", to=panda)
    digests.create(digest.ref(), mail=letter)
    labels.create(tag.ref(), label="urgent")
    return graph


def cycle_graph() -> Graph:
    """egg.chicken -> chicken, chicken.egg -> egg: a relation cycle of two schemas."""
    graph = Graph()
    owner = graph.builder.author(5)
    egg = owner.schema(40, "egg")
    chicken = owner.schema(41, "chicken")
    egg.migrate(create_field("chicken", "relation", schema=chicken.log_ref))
    chicken.migrate(create_field("egg", "relation", schema=egg.log_ref))
    graph.schemas = {"egg": egg, "chicken": chicken}
    return graph
