-- Accounts' events once they leave Redis. Each account's events are
-- numbered 1, 2, ... in its log in Redis, which keeps only their hot tail
-- (minutes); the workers' archiver copies them here first, a chunk of
-- consecutive events per account at a time (not a row per event, so an
-- event costs PostgreSQL a share of one row), and a stream that resumes
-- further back than Redis holds is served from here. Chunks are kept for
-- EVENTS_RETENTION after they were archived, then pruned in batches (by
-- archived_at).
--
-- A chunk's events are a JSON array of the events exactly as the stream
-- sends them: {"sequence","id","type","time","data"} each. No reference to
-- accounts: the history is what the log held, under the log's own name
-- for the account.
--
-- The key is (account_id, last_sequence): a reader's "the chunks holding
-- events after n" and the archiver's "how far does the history go" are
-- both one index range. Chunks of an account never overlap; the archiver
-- writes a chunk only past what the history holds (under an advisory lock
-- per account, postgres/sql/account_events_lock.sql), so two archivers or
-- one that crashed before marking Redis never write an event twice. A
-- chunk holds at most 1,024 events (the widest a reader looks back for
-- the chunk holding an event).
CREATE TABLE account_event_chunks (
    account_id     text        NOT NULL,
    first_sequence bigint      NOT NULL CHECK (first_sequence > 0),
    last_sequence  bigint      NOT NULL,
    archived_at    timestamptz NOT NULL DEFAULT now(),
    events         text        NOT NULL,
    PRIMARY KEY (account_id, last_sequence),
    CHECK (last_sequence >= first_sequence AND last_sequence - first_sequence < 1024)
);

CREATE INDEX account_event_chunks_archived_at ON account_event_chunks (archived_at);

-- Compressed even when small (a chunk of a few events stays in the row),
-- with lz4 where the server has it: cheaper than the default pglz.
ALTER TABLE account_event_chunks SET (toast_tuple_target = 256);
DO $$
BEGIN
    IF (SELECT 'lz4' = ANY (enumvals) FROM pg_settings WHERE name = 'default_toast_compression') THEN
        ALTER TABLE account_event_chunks ALTER COLUMN events SET COMPRESSION lz4;
    END IF;
END
$$;
