-- The product's own tables, in schema p2panda; materialized tables live in p2panda_data.
-- Idempotent: applied by every command that opens the store.
CREATE SCHEMA IF NOT EXISTS p2panda;
CREATE SCHEMA IF NOT EXISTS p2panda_data;

-- Every distinct entry that reached the store, append-only, keyed by its entry hash
-- (for bytes that do not decode: the YASMF hash of the bytes). `verdict` is NULL until
-- the pipeline has verified the entry (once, ever), then 'ok' or a reason code. Entries
-- that ingest can already reject (undecodable, payload mismatch) arrive with a verdict.
CREATE TABLE IF NOT EXISTS p2panda.entries (
    hash            bytea PRIMARY KEY,
    entry           bytea NOT NULL,
    payload         bytea,
    author          bytea,
    log_id          numeric(20, 0),
    seq_num         numeric(20, 0),
    ingest_seq      bigserial UNIQUE,
    received_at     timestamptz NOT NULL DEFAULT now(),
    verdict         text,
    verdict_message text
);
-- A log's entries in order, with each one's hash and ingest_seq in the index itself: the
-- accounting check pairs a schema's stored entries with its accounts from this index
-- alone, never reading the wide rows (1M store: 0.05 s a schema against 0.23 s with the
-- key alone, whose row reads were one page each). It replaces `entries_log` (dropped below).
CREATE INDEX IF NOT EXISTS entries_by_log ON p2panda.entries (author, log_id, seq_num)
    INCLUDE (hash, ingest_seq);

-- What verification learned about each good entry whose message is a schema message
-- (meta, migration, revert): the sensors find reverts here without decoding payloads.
-- The index of every other message (kind, the schema it names: `schema_id` for
-- [author, log, version] refs, `schema_hash` for hash refs) is kept in the columnar
-- store only. Whether an entry is verified and good: `store.pipeline_state.VERIFIED_GOOD`.
CREATE TABLE IF NOT EXISTS p2panda.message_index (
    hash           bytea PRIMARY KEY,  -- of an entry (see "No foreign keys" below)
    kind           text,          -- message kind; NULL if the payload does not decode
    schema_id      text,
    schema_version numeric(20, 0),
    schema_hash    bytea,
    instance       bytea
);

-- One row per registered schema.
CREATE TABLE IF NOT EXISTS p2panda.schemas (
    schema_id       text PRIMARY KEY,
    author          bytea NOT NULL,
    log_id          numeric(20, 0) NOT NULL,
    name            text,          -- from the schema's meta message
    registered_name text,          -- `panda register --name`
    version         bigint,        -- current effective version
    version_hash    text,
    table_name      text NOT NULL, -- schema-qualified, usable in SQL as written
    status          text NOT NULL, -- registered | materialized | dropped | pending | failed
    status_message  text,
    rows            bigint,
    upstream        text[] NOT NULL DEFAULT '{}',
    registered_at   timestamptz NOT NULL DEFAULT now(),
    materialized_at timestamptz
);

-- Where every entry ended (rule A-ONCE, docs/semantics.md), written by the pipeline. `origin`
-- names the stage that decided it (verify, chain, schema, pending, instance), so each
-- stage replaces only its own rows.
CREATE TABLE IF NOT EXISTS p2panda.accounts (
    hash      bytea PRIMARY KEY,  -- of an entry (see "No foreign keys" below)
    schema_id text,
    state     text NOT NULL CHECK (state IN ('applied', 'superseded', 'pending', 'rejected')),
    reason    text,
    message   text,
    origin    text NOT NULL DEFAULT 'pipeline'
);

-- One row per log with verified entries, from the pipeline's index step: schema log or
-- instance log, the first schema an instance log names, and the schema it is assigned to
-- (NULL while that cannot be determined; `assignment` says which case).
CREATE TABLE IF NOT EXISTS p2panda.logs (
    author         bytea NOT NULL,
    log_id         numeric(20, 0) NOT NULL,
    is_schema      boolean NOT NULL,
    ref_schema_id  text,
    ref_version    numeric(20, 0),
    ref_hash       bytea,
    schema_id      text,
    assignment     text NOT NULL,  -- schema | assigned | pending | duplicate
    PRIMARY KEY (author, log_id)
);
CREATE INDEX IF NOT EXISTS logs_schema ON p2panda.logs (schema_id);
-- The schema logs, read by every index step that appends (`store.catalog.schema_logs`).
CREATE INDEX IF NOT EXISTS logs_schema_logs ON p2panda.logs (author, log_id) WHERE is_schema;
CREATE INDEX IF NOT EXISTS accounts_schema ON p2panda.accounts (schema_id, state);
-- The accounts of the index step's stages (verify, chain, schema, pending): few beside the
-- instances' accounts, which are almost every row, and each index step replaces them by
-- `origin`. Without this a scan of every account: 0.3 s each at 1M entries.
CREATE INDEX IF NOT EXISTS accounts_origin ON p2panda.accounts (origin)
    WHERE origin <> 'instance';
-- The rejected entries of the whole store (`panda status --rejected` without a schema,
-- `store.rejections`): few beside the accounts, found without a scan of them all.
CREATE INDEX IF NOT EXISTS accounts_rejected ON p2panda.accounts (schema_id)
    WHERE state = 'rejected';

-- Instances deleted in each materialized schema (by a delete or a cascade): what the
-- schemas that relate to it need for their own cascades.
CREATE TABLE IF NOT EXISTS p2panda.deleted_instances (
    schema_id   text NOT NULL,
    instance_id bytea NOT NULL,
    PRIMARY KEY (schema_id, instance_id)
);
-- The order ids joined their sets in: a table's build state records each set it
-- cascades from as (size, newest `added`), so a later build tells a set that only grew
-- since (its ids up to that mark all there) and finds the ids added since
-- (store/tables.py `grown_deletes`).
ALTER TABLE p2panda.deleted_instances ADD COLUMN IF NOT EXISTS added bigserial;
CREATE INDEX IF NOT EXISTS deleted_instances_added ON p2panda.deleted_instances (schema_id, added);

-- What the last index step saw (store size, newest entry, registered schemas): a run that
-- finds the same has nothing to chain or assign again.
CREATE TABLE IF NOT EXISTS p2panda.index_state (
    id          integer PRIMARY KEY CHECK (id = 1),
    fingerprint text NOT NULL
);

-- Added after the first release: registry columns for views by name, the schema's
-- description (their comment), and how lossy its migrations were.
ALTER TABLE p2panda.schemas ADD COLUMN IF NOT EXISTS description text;
ALTER TABLE p2panda.schemas ADD COLUMN IF NOT EXISTS view_name text;      -- in p2panda_api
ALTER TABLE p2panda.schemas ADD COLUMN IF NOT EXISTS view_conflict text;  -- why no view
-- {"<version>": "safe" | "lossy"} for every migration version of the schema log
ALTER TABLE p2panda.schemas ADD COLUMN IF NOT EXISTS migrations jsonb NOT NULL DEFAULT '{}';
-- {"<field>": rows whose value fell back to the field's default}
ALTER TABLE p2panda.schemas ADD COLUMN IF NOT EXISTS fallbacks jsonb NOT NULL DEFAULT '{}';

-- Lenses in time: tables built by `panda materialize --as-of-version N`, as the schema's
-- table was at version N (in schema p2panda_versions), beside the current one.
CREATE SCHEMA IF NOT EXISTS p2panda_versions;
CREATE TABLE IF NOT EXISTS p2panda.schema_versions (
    schema_id       text NOT NULL REFERENCES p2panda.schemas (schema_id),
    version         bigint NOT NULL,
    version_hash    text NOT NULL,
    table_name      text NOT NULL UNIQUE,
    rows            bigint NOT NULL,
    view_name       text,          -- in p2panda_api: "<name>_v<version>"
    materialized_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (schema_id, version)
);

-- Views named after registered names (and "<name>_v<version>" for the tables above),
-- for tools that generate APIs from PostgreSQL; derived from the registry (views.py).
CREATE SCHEMA IF NOT EXISTS p2panda_api;

-- The data plane's progress (one row): the columnar store of this database (its
-- directory under P2PANDA_WAREHOUSE), how far verification has read the entry store
-- (by ingest_seq), the last batch appended to the columnar store, and the chained run
-- the reduction reads. Verification appends; nothing updates p2panda.entries.
CREATE TABLE IF NOT EXISTS p2panda.pipeline_state (
    id               integer PRIMARY KEY CHECK (id = 1),
    warehouse_token  text NOT NULL,
    verified_through bigint NOT NULL DEFAULT 0,
    batch            integer NOT NULL DEFAULT 0,
    chained_run      text
);
-- The index fingerprint a schema's table was built from: equal to the current one, the
-- table is up to date and a run leaves it alone.
ALTER TABLE p2panda.schemas ADD COLUMN IF NOT EXISTS built_fingerprint text;
-- What the table was built from, for the next build to add only what is new: the newest
-- verified batch it saw, a digest of its messages, and a key of its lens (BuildState).
ALTER TABLE p2panda.schemas ADD COLUMN IF NOT EXISTS built_state jsonb;
-- Whether the last build added to the table (pipeline/build/increments.py) or built it whole.
ALTER TABLE p2panda.schemas ADD COLUMN IF NOT EXISTS built_incrementally boolean NOT NULL
    DEFAULT false;
-- Where the last build ran: `spark` (Spark jobs) or `driver` (the driver path of a small
-- increment, pipeline/build/paths.py); NULL before it was recorded.
ALTER TABLE p2panda.schemas ADD COLUMN IF NOT EXISTS built_path text;
-- Where each log stands, so that the next index step continues it from its tip instead
-- of chaining it again: its last accepted seq, whether that entry ended the log, whether
-- every entry of it was accepted, and why its entries wait (if they do).
ALTER TABLE p2panda.logs ADD COLUMN IF NOT EXISTS tip_seq numeric(20, 0);
ALTER TABLE p2panda.logs ADD COLUMN IF NOT EXISTS tip_ended boolean;
ALTER TABLE p2panda.logs ADD COLUMN IF NOT EXISTS clean boolean;
ALTER TABLE p2panda.logs ADD COLUMN IF NOT EXISTS why_reason text;
ALTER TABLE p2panda.logs ADD COLUMN IF NOT EXISTS why_message text;
-- The layers of chained messages appended on top of `chained_run` since it was written
-- whole, and the newest verified batch the index step saw.
ALTER TABLE p2panda.pipeline_state ADD COLUMN IF NOT EXISTS chained_deltas text[] NOT NULL
    DEFAULT '{}';
-- How many rows p2panda.logs holds, kept by each index step's commit: a live run reads it
-- instead of counting every log (NULL until the first index step since it was added).
ALTER TABLE p2panda.pipeline_state ADD COLUMN IF NOT EXISTS logs_count bigint;
ALTER TABLE p2panda.index_state ADD COLUMN IF NOT EXISTS batch integer;
-- The verified batches up to `compacted_through`, rewritten as one directory of the
-- columnar store (`compacted_run`, each entry's batch a column of it): a read of every
-- verified entry lists it and the later batches, not one directory per batch ever verified.
ALTER TABLE p2panda.pipeline_state ADD COLUMN IF NOT EXISTS compacted_run text;
ALTER TABLE p2panda.pipeline_state ADD COLUMN IF NOT EXISTS compacted_through integer NOT NULL
    DEFAULT 0;
-- How many verified entries are good (the pipeline sizes its shuffles by it), kept by
-- each verification: counting them is a scan of the entry store (0.25 s at 1M entries).
-- A store verified before the column existed counts once here.
ALTER TABLE p2panda.pipeline_state ADD COLUMN IF NOT EXISTS good_entries bigint;
UPDATE p2panda.pipeline_state s SET good_entries =
    (SELECT count(*) FROM p2panda.entries e WHERE e.ingest_seq <= s.verified_through)
    - (SELECT count(*) FROM p2panda.accounts WHERE origin = 'verify')
WHERE good_entries IS NULL;
ALTER TABLE p2panda.pipeline_state ALTER COLUMN good_entries SET DEFAULT 0;
ALTER TABLE p2panda.pipeline_state ALTER COLUMN good_entries SET NOT NULL;
-- Verification reads the new entries by their `ingest_seq` range and writes no verdict
-- back: the index of the entries without a verdict that earlier releases kept was only a
-- cost to each ingest (a million entries: 15.2-15.5 s without it, 16.0-18.0 s with it).
DROP INDEX IF EXISTS p2panda.entries_unverified;
-- `entries_by_log` has its keys and more.
DROP INDEX IF EXISTS p2panda.entries_log;
-- Only the schema messages are indexed in PostgreSQL (see message_index above).
DELETE FROM p2panda.message_index
WHERE kind IS NULL OR kind NOT IN ('schema-meta', 'schema-migration', 'schema-revert');

-- No foreign keys from the message index and the accounts to the entries: their rows are
-- written in bulk, from the entries themselves, and entries are never deleted. The
-- per-row check of such a key was three quarters of the time of a schema's swap (its
-- accounts' upsert: 1.18 s against 0.27 s for 50,000 rows), and of the message index's
-- insert. The accounting check (defs/checks) still finds an account of no stored entry.
ALTER TABLE p2panda.message_index DROP CONSTRAINT IF EXISTS message_index_hash_fkey;
ALTER TABLE p2panda.accounts DROP CONSTRAINT IF EXISTS accounts_hash_fkey;

-- What each chained layer of the columnar store holds, summed for the build plan's
-- digests (pipeline/build/increments.py): per schema, assigned to it or not, and verified batch,
-- a count and a sum of hash bits. A layer is written once, under a name of its own, so its
-- sums never change; the rows of layers no longer read are deleted when new sums are kept.
CREATE TABLE IF NOT EXISTS p2panda.layer_digests (
    layer text PRIMARY KEY,
    sums  jsonb NOT NULL
);

-- The chained layers whose schema partition passed the blocking decoded-messages check
-- (store/checked_layers.py): a check reads only the layers it has not passed yet.
CREATE TABLE IF NOT EXISTS p2panda.checked_layers (
    schema_id text NOT NULL,
    layer     text NOT NULL,
    PRIMARY KEY (schema_id, layer)
);

-- Each schema's table as it last passed the blocking lens check (store/checked_tables.py):
-- its relation's oid and the ingest_seq its build held entries through. In a run that
-- built the table, a check of the same relation reads only the rows written since.
CREATE TABLE IF NOT EXISTS p2panda.checked_tables (
    schema_id text PRIMARY KEY,
    relation  oid NOT NULL,
    through   bigint NOT NULL
);

-- Who holds the pipeline lock (store/pipeline_lock.py): the session that takes it writes
-- its run and schema here, and what its Spark work is doing as it goes; a session waiting
-- for the lock reads it to say what it waits for. A row whose session no longer holds the
-- lock is not believed (pg_locks says who holds it).
CREATE TABLE IF NOT EXISTS p2panda.pipeline_lock_holder (
    id          integer PRIMARY KEY CHECK (id = 1),
    pid         integer NOT NULL,
    run_id      text,
    schema_id   text,
    since       timestamptz NOT NULL,
    progress    text,
    progress_at timestamptz
);

-- What the entries sensor has read of the entry store (store/entry_claims.py): its cursor
-- as of its last tick, written under the entries lock. The live listener reads it under the
-- same lock and leaves those entries to the sensor, so one entry is one run.
CREATE TABLE IF NOT EXISTS p2panda.entries_claim (
    id     integer PRIMARY KEY CHECK (id = 1),
    cursor text NOT NULL
);

-- "Pending" is the one word for not-yet (statuses.py): rows written before it said
-- 'waiting' (a schema's status, a log's assignment, the stage of an account).
UPDATE p2panda.schemas SET status = 'pending' WHERE status = 'waiting';
UPDATE p2panda.logs SET assignment = 'pending' WHERE assignment = 'waiting';
UPDATE p2panda.accounts SET origin = 'pending' WHERE origin = 'waiting';

-- A registered name is held by one schema (rule T-NAME-HELD, docs/semantics.md): `panda
-- register` refuses a name another schema is known by, and this index refuses a second
-- holder of a registered name whoever writes the row. Registries from before could hold
-- a name twice: the first registration keeps it (registered_at, then schema id), the
-- others get their qualified name, as `registry.qualified_name` makes it
-- (<name>_<first 8 hex digits of the author>_<log id>, the name cut to 64 characters),
-- or none if even that one is taken.
UPDATE p2panda.schemas s
SET registered_name = left(s.registered_name, 64 - length(q.suffix)) || q.suffix
FROM (SELECT schema_id, '_' || left(schema_id, 8) || '_' || split_part(schema_id, '-', 2)
      AS suffix FROM p2panda.schemas) q
WHERE q.schema_id = s.schema_id
  AND EXISTS (SELECT 1 FROM p2panda.schemas o
              WHERE o.registered_name = s.registered_name
                AND (o.registered_at, o.schema_id) < (s.registered_at, s.schema_id));
UPDATE p2panda.schemas s SET registered_name = NULL
WHERE EXISTS (SELECT 1 FROM p2panda.schemas o
              WHERE o.registered_name = s.registered_name
                AND (o.registered_at, o.schema_id) < (s.registered_at, s.schema_id));
CREATE UNIQUE INDEX IF NOT EXISTS schemas_registered_name
    ON p2panda.schemas (registered_name);

-- Where entries were ingested from (store/ingest_sources.py): one row per file a
-- `panda ingest` read, and on each entry it stored that row's id and the line the entry
-- was on (12 bytes an entry, not its path); a copy that replaced a stored one (the right
-- payload after a wrong one) names its own line. Entries that came another way (an app's
-- INSERT, a bench) have none. `panda status --rejected` shows them as `file:line`.
CREATE TABLE IF NOT EXISTS p2panda.ingest_sources (
    id          bigserial PRIMARY KEY,
    path        text NOT NULL,
    ingested_at timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE p2panda.entries ADD COLUMN IF NOT EXISTS source_id bigint;
ALTER TABLE p2panda.entries ADD COLUMN IF NOT EXISTS source_line integer;

-- This text changes with a release that changes the store (it is applied again then, and
-- only then): the next run indexes again, so the chained messages in the columnar store
-- have the columns this release reads (the `batch` of each message was added so), and
-- the logs table says where each log stands.
DELETE FROM p2panda.index_state;
