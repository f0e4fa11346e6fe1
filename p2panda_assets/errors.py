"""Reason codes: the one documented list of why an entry or message is not applied.

Every rejection in the product carries exactly one `Reason`. Decoders raise
`P2pandaError` and nothing else, so callers can record the code and move on to the
good data beside it. Pending states use the `awaiting-*` codes: they say what an
entry waits for, not that it is wrong.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Layer(StrEnum):
    """Where a reason code is decided: the sections of `Reason`, in its order."""

    ENTRY = "entry"  # an entry's bytes (`protocol.entry`)
    LOG = "log"  # a log's entries together: the chain rules (`protocol.log`)
    CBOR = "cbor"  # a payload's CBOR
    MESSAGE = "message"  # a payload as a message of its kind
    SCHEMA_LOG = "schema-log"  # a schema log folded (the engine)
    INSTANCE = "instance"  # instance messages reduced (the engine)
    COMMAND = "command"  # the command line and the files it reads and writes
    RUNTIME = "runtime"  # the running product: its database, Spark, its own failures
    PENDING = "pending"  # what an entry waits for


class Reason(StrEnum):
    """Why an entry or message was rejected (or, for `AWAITING_*`, what it waits for).
    Each section below is a `Layer` (`Reason.layer`, `BY_LAYER`); the codes are the wire's
    and never change."""

    # --- bamboo entry bytes ---------------------------------------------------------
    TRUNCATED = "truncated"  # the bytes end inside a field
    TRAILING_BYTES = "trailing-bytes"  # bytes left after the signature
    UNKNOWN_TAG = "unknown-tag"  # first byte is neither 0x00 (entry) nor 0x01 (end of log)
    NON_CANONICAL_VARU64 = "non-canonical-varu64"  # a varu64 not in its shortest form
    SEQ_ZERO = "seq-zero"  # seq num 0; logs start at 1
    BAD_HASH = "bad-hash"  # unknown hash algorithm or a digest of the wrong length
    MISSING_LINK = "missing-link"  # an entry to encode lacks a link its seq num requires
    UNEXPECTED_LINK = "unexpected-link"  # an entry to encode has a link its seq num forbids
    BAD_SIGNATURE = "bad-signature"  # ed25519 check over fields 1..8 fails (or bad key)
    PAYLOAD_TOO_LARGE = "payload-too-large"  # payload size above 1 MiB
    PAYLOAD_SIZE_MISMATCH = "payload-size-mismatch"  # payload length != payload size field
    PAYLOAD_HASH_MISMATCH = "payload-hash-mismatch"  # payload hash != payload hash field
    MISSING_PAYLOAD = "missing-payload"  # an entry arrived without its payload
    # A copy of a stored entry with another payload (necessarily a wrong one, as the
    # entry names its payload's hash): not stored, the stored copy stays (`panda ingest`).
    PAYLOAD_CONFLICT = "payload-conflict"
    # --- bamboo logs ----------------------------------------------------------------
    BACKLINK_MISMATCH = "backlink-mismatch"  # backlink is not the hash of entry seq-1
    LIPMAA_MISMATCH = "lipmaa-mismatch"  # lipmaa link is not the hash of entry lipmaa(seq)
    HASH_ALGORITHM_MISMATCH = "hash-algorithm-mismatch"  # a log mixes YASMF and YAMF
    FORK = "fork"  # a second, different entry at a taken (author, log, seq), and all after
    AFTER_END_OF_LOG = "after-end-of-log"  # an entry after an end-of-log entry
    # --- CBOR -----------------------------------------------------------------------
    CBOR_MALFORMED = "cbor-malformed"  # not well-formed CBOR, or indefinite lengths
    CBOR_DUPLICATE_KEY = "cbor-duplicate-key"  # a map repeats a key
    CBOR_TOO_DEEP = "cbor-too-deep"  # nesting deeper than 16
    CBOR_NON_TEXT_KEY = "cbor-non-text-key"  # a map key that is not a text string
    CBOR_UNSUPPORTED = "cbor-unsupported"  # a tag or simple value the messages never use
    # --- messages -------------------------------------------------------------------
    UNKNOWN_KIND = "unknown-kind"  # "kind" names no message kind
    UNKNOWN_KEY = "unknown-key"  # a map key the message kind does not define
    MISSING_KEY = "missing-key"  # a required key is absent
    UNEXPECTED_KEY = "unexpected-key"  # a defined key not allowed in this combination
    BAD_TYPE = "bad-type"  # a value of the wrong CBOR type
    BAD_VALUE = "bad-value"  # right CBOR type, value out of range or malformed
    BAD_NAME = "bad-name"  # schema name not 1..64 ASCII characters
    BAD_FIELD_NAME = "bad-field-name"  # field name empty, > 63 bytes, control chars, or "_..."
    UNKNOWN_TYPE = "unknown-type"  # a field type that is not one of rule M-TYPE's
    # --- schema logs (engine) -------------------------------------------------------
    NOT_SCHEMA_MESSAGE = "not-schema-message"  # an instance message on a schema log
    FIELD_EXISTS = "field-exists"  # migration creates a field the lens already has
    FIELD_MISSING = "field-missing"  # migration updates or removes a field the lens lacks
    DUPLICATE_FIELD_CHANGE = "duplicate-field-change"  # one migration names a field twice
    BAD_DEFAULT = "bad-default"  # default does not convert to the type or validate
    BAD_VALIDATION = "bad-validation"  # validation is not a valid RE2 expression
    BAD_REVERT_TARGET = "bad-revert-target"  # revert target not an earlier version
    SCHEMA_FROZEN = "schema-frozen"  # after an invalid schema entry, later ones are rejected
    # --- instance messages (engine) -------------------------------------------------
    NOT_INSTANCE_MESSAGE = "not-instance-message"  # a schema message on an instance log
    NOT_AUTHOR = "not-author"  # update/delete of an instance created by another author
    MIXED_LOG = "mixed-log"  # a log holding instance messages of more than one schema
    REVERTED_VERSION = "reverted-version"  # create/update naming a dead (reverted) version
    REJECTED_VERSION = "rejected-version"  # naming a schema version that was itself rejected
    UNKNOWN_FIELD = "unknown-field"  # a field the named version's lens does not have
    INVALID_VALUE = "invalid-value"  # value does not fit the field type at its version
    VALIDATION_FAILED = "validation-failed"  # value fails the field's RE2 validation
    UNKNOWN_INSTANCE = "unknown-instance"  # update/delete of an instance never created
    DUPLICATE_LOG = "duplicate-log"  # an author's second log for a schema it already has a log for
    RELATION_CYCLE = "relation-cycle"  # schemas whose relations form a cycle are not built
    WRONG_SCHEMA = "wrong-schema"  # update/delete naming an instance of another schema
    INSTANCE_DELETED = "instance-deleted"  # update/delete after the instance was deleted
    # --- command line and files ---------------------------------------------------
    BAD_HEX = "bad-hex"  # input that should be hex is not
    BAD_INPUT = "bad-input"  # a line or file that is not in the documented format
    BAD_USAGE = "bad-usage"  # a command line `panda` does not take (an argument missing)
    UNREADABLE_FILE = "unreadable-file"  # a named file cannot be read
    UNWRITABLE_FILE = "unwritable-file"  # an output file cannot be written
    # $P2PANDA_HOME/authoring.json is not what authoring/state.py writes (not JSON, a
    # wrong shape, or records that contradict each other): no log is continued from it.
    BAD_STATE = "bad-state"
    KEY_EXISTS = "key-exists"  # `panda key new` would overwrite a key
    NO_KEY = "no-key"  # a command needs a key and none is stored
    SCHEMA_EXISTS = "schema-exists"  # `panda schema NAME init` for a name already authored here
    UNKNOWN_SCHEMA = "unknown-schema"  # a command names a schema this home does not know
    NAME_TAKEN = "name-taken"  # `panda register --name`: another registered schema holds it
    NO_CHANGE = "no-change"  # `panda schema NAME revert` that changes nothing, without --force
    # A revert or migration that would reject instances, not confirmed (`--yes`, or y at
    # the prompt of a terminal): nothing is published.
    UNCONFIRMED = "unconfirmed"
    # --- the running product -------------------------------------------------------
    DATABASE_UNAVAILABLE = "database-unavailable"  # the database cannot be started or reached
    # This machine lacks what Spark needs (Java, the PostgreSQL JDBC driver): said before
    # Spark starts, not as its Java stack trace (`setup_checks.preflight`; `panda doctor`).
    SETUP = "setup"
    INTERNAL = "internal"  # a failure of the product itself (a bug, or a refused write)
    BUSY = "busy"  # another run holds the pipeline lock for too long
    # A run's Spark work that cannot finish: it fails, and frees the run queue and the
    # pipeline lock, instead of holding them until someone kills it (pipeline.spark.watchdog).
    NO_EXECUTORS = "no-executors"  # a Spark job waited too long with no executor to run on
    STALLED = "stalled"  # a Spark job's tasks made no progress for too long
    OUT_OF_MEMORY = "out-of-memory"  # Spark's JVM ran out of heap (pipeline.spark.jvm_failures)
    # --- pending: what an entry waits for -------------------------------------------
    AWAITING_ENTRY = "awaiting-entry"  # an earlier entry of its log has not arrived
    AWAITING_SCHEMA = "awaiting-schema"  # the schema (log) is not known or registered
    AWAITING_VERSION = "awaiting-version"  # the named schema version has not arrived

    @property
    def layer(self) -> Layer:
        """The layer whose section declares this code."""
        return _LAYER_OF[self]


# The first code of each layer's section: a code belongs to the section it is declared in
# (tests/test_reason_codes.py holds these to the section comments above).
SECTIONS: dict[Layer, Reason] = {
    Layer.ENTRY: Reason.TRUNCATED,
    Layer.LOG: Reason.BACKLINK_MISMATCH,
    Layer.CBOR: Reason.CBOR_MALFORMED,
    Layer.MESSAGE: Reason.UNKNOWN_KIND,
    Layer.SCHEMA_LOG: Reason.NOT_SCHEMA_MESSAGE,
    Layer.INSTANCE: Reason.NOT_INSTANCE_MESSAGE,
    Layer.COMMAND: Reason.BAD_HEX,
    Layer.RUNTIME: Reason.DATABASE_UNAVAILABLE,
    Layer.PENDING: Reason.AWAITING_ENTRY,
}


def _layer_of() -> dict[Reason, Layer]:
    starts = {first: layer for layer, first in SECTIONS.items()}
    found: dict[Reason, Layer] = {}
    layer = Layer.ENTRY
    for reason in Reason:
        layer = starts.get(reason, layer)
        found[reason] = layer
    return found


_LAYER_OF = _layer_of()
# Each layer's codes, in their order.
BY_LAYER: dict[Layer, tuple[Reason, ...]] = {
    layer: tuple(r for r, of in _LAYER_OF.items() if of is layer) for layer in Layer
}


class P2pandaError(Exception):
    """A typed failure with exactly one reason code and a human message."""

    def __init__(self, reason: Reason, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message

    def __reduce__(self) -> tuple[type[P2pandaError], tuple[Reason, str]]:
        # Keep the exception picklable (Spark ships it between processes).
        return (type(self), (self.reason, self.message))


@dataclass(frozen=True, slots=True)
class Rejection:
    """A rejection as a value: the reason code and message of an entry or message that
    is not applied (what a `P2pandaError` carries, once caught and recorded)."""

    reason: Reason
    message: str


@dataclass(frozen=True, slots=True)
class Pending:
    """Something that cannot be applied, resolved or built yet, as a value: the reason
    code of what it waits for (`awaiting-*`; for a schema also `relation-cycle`) and a
    message. It applies once that arrives."""

    reason: Reason
    message: str
