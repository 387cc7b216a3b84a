ALTER INDEX outbox_applied_pkey RENAME TO journal_applied_pkey;
ALTER TABLE outbox_applied RENAME TO journal_applied;

ALTER SEQUENCE outbox_id_seq RENAME TO journal_outbox_id_seq;
ALTER INDEX outbox_unrelayed RENAME TO journal_outbox_unrelayed;
ALTER INDEX outbox_name_version_key RENAME TO journal_outbox_name_version_key;
ALTER INDEX outbox_pkey RENAME TO journal_outbox_pkey;
ALTER TABLE outbox RENAME TO journal_outbox;
