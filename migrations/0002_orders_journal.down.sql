DROP TABLE journal_applied;
DROP TABLE journal_outbox;
DROP TABLE orders;
