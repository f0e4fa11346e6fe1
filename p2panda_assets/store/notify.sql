-- Push, not poll (p2panda_assets/live): every statement that adds entries to the store,
-- whoever runs it (`panda ingest`'s merge, a p2panda node's INSERT, a COPY), notifies the
-- channel p2panda_entries once, when its transaction commits. The listener in the Dagster
-- daemon starts a run for the new entries at once; the sensors stay the safety net.
-- Statement level: a COPY of 10,000 entries is one notification, and PostgreSQL folds
-- the equal notifications of one transaction into one. The payload is empty: the
-- listener reads what is new by `ingest_seq`, as the entries sensor does.
CREATE OR REPLACE FUNCTION p2panda.notify_entries() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('p2panda_entries', '');
    RETURN NULL;
END
$$;
CREATE OR REPLACE TRIGGER entries_notify
    AFTER INSERT ON p2panda.entries
    FOR EACH STATEMENT EXECUTE FUNCTION p2panda.notify_entries();
