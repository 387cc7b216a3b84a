-- The views under the outbox's old names, as migration 0004 created them.
CREATE VIEW journal_outbox AS SELECT * FROM outbox;
CREATE VIEW journal_applied AS SELECT * FROM outbox_applied;
