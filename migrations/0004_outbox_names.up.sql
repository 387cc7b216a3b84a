-- The outbox takes its plain name: "journal" reads as the ledger's journal in
-- an exchange's codebase, and these tables are no ledger. Renames only; no
-- row changes, so a worker of either version sees the same data after it.
ALTER TABLE journal_outbox RENAME TO outbox;
ALTER INDEX journal_outbox_pkey RENAME TO outbox_pkey;
ALTER INDEX journal_outbox_name_version_key RENAME TO outbox_name_version_key;
ALTER INDEX journal_outbox_unrelayed RENAME TO outbox_unrelayed;
ALTER SEQUENCE journal_outbox_id_seq RENAME TO outbox_id_seq;

ALTER TABLE journal_applied RENAME TO outbox_applied;
ALTER INDEX journal_applied_pkey RENAME TO outbox_applied_pkey;
