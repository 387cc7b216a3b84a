-- The balanced-ledger check runs once per ledger entry at commit and looks up
-- one transaction's entries: an index lookup, whatever the table's size. Its
-- plan is cached per session, and a plan made while ledger_entries was tiny
-- (a fresh database, or statistics from its first minute) scans the whole
-- table; every commit then reads every entry ever written, and settlement
-- slows as the ledger grows. The setting holds only while the function runs.
ALTER FUNCTION ledger_transaction_balanced() SET enable_seqscan = off;
