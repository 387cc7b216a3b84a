-- The outbox takes its plain name: "journal" reads as the ledger's journal in
-- an exchange's codebase, and these tables are no ledger. Renames only; no
-- row changes.
ALTER TABLE journal_outbox RENAME TO outbox;
ALTER INDEX journal_outbox_pkey RENAME TO outbox_pkey;
ALTER INDEX journal_outbox_name_version_key RENAME TO outbox_name_version_key;
ALTER INDEX journal_outbox_unrelayed RENAME TO outbox_unrelayed;
ALTER SEQUENCE journal_outbox_id_seq RENAME TO outbox_id_seq;
ALTER TABLE outbox RENAME CONSTRAINT journal_outbox_version_check TO outbox_version_check;

ALTER TABLE journal_applied RENAME TO outbox_applied;
ALTER INDEX journal_applied_pkey RENAME TO outbox_applied_pkey;
ALTER TABLE outbox_applied RENAME CONSTRAINT journal_applied_version_check TO outbox_applied_version_check;

-- Processes migrate at start, so during a rolling deploy workers of the
-- previous release still name the old tables. These views (simple, so
-- PostgreSQL writes through them, ON CONFLICT and FOR UPDATE included) keep
-- those workers settling until every process runs this release; a later
-- migration drops them.
CREATE VIEW journal_outbox AS SELECT * FROM outbox;
CREATE VIEW journal_applied AS SELECT * FROM outbox_applied;
