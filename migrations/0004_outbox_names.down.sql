DROP VIEW journal_applied;
DROP VIEW journal_outbox;

ALTER TABLE outbox_applied RENAME CONSTRAINT outbox_applied_version_check TO journal_applied_version_check;
ALTER INDEX outbox_applied_pkey RENAME TO journal_applied_pkey;
ALTER TABLE outbox_applied RENAME TO journal_applied;

ALTER TABLE outbox RENAME CONSTRAINT outbox_version_check TO journal_outbox_version_check;
ALTER SEQUENCE outbox_id_seq RENAME TO journal_outbox_id_seq;
ALTER INDEX outbox_unrelayed RENAME TO journal_outbox_unrelayed;
ALTER INDEX outbox_name_version_key RENAME TO journal_outbox_name_version_key;
ALTER INDEX outbox_pkey RENAME TO journal_outbox_pkey;
ALTER TABLE outbox RENAME TO journal_outbox;
