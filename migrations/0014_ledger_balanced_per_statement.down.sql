-- Back to 0001's check: each transaction at commit, one query per entry.
DROP TRIGGER ledger_entries_balanced ON ledger_entries;
DROP FUNCTION ledger_statement_balanced();

CREATE CONSTRAINT TRIGGER ledger_entries_balanced
    AFTER INSERT ON ledger_entries
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION ledger_transaction_balanced();
