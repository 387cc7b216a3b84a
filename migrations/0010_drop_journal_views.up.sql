-- The views migration 0004 kept under the outbox's old names, for workers
-- of the release before it during a rolling deploy, go as 0004 promised:
-- every process has run a release naming only outbox and outbox_applied
-- since, and nothing reads or writes these names.
DROP VIEW journal_applied;
DROP VIEW journal_outbox;
