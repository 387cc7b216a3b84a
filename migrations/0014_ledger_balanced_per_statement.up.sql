-- The balanced-ledger check, once per statement instead of once per entry.
--
-- 0001 checked each ledger transaction at commit, with one query per entry
-- inserted (a deferred row trigger): a settlement batch of 120 orders wrote
-- ~800 entries and ran ~800 index lookups at its commit (docs/performance.md,
-- "Where the matching time goes": 6.6 queries per order). Every writer
-- inserts a transaction's entries in one statement (settle_write_ledger.sql,
-- ledger_insert_entries.sql), so the rule is now
-- stricter and cheaper: the entries one statement inserts balance, per
-- transaction and asset. One aggregate over the statement's new rows (its
-- transition table), no lookup in ledger_entries. A transaction's entries
-- are the union of the statements that inserted them, each summing to zero
-- per asset, and entries are never updated or deleted (append-only): so no
-- unbalanced transaction can commit, as before.
CREATE FUNCTION ledger_statement_balanced() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    unbalanced RECORD;
BEGIN
    SELECT transaction_id, asset INTO unbalanced
      FROM inserted
     GROUP BY transaction_id, asset
    HAVING sum(amount) <> 0
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'ledger transaction % does not balance in %', unbalanced.transaction_id, unbalanced.asset
            USING ERRCODE = 'check_violation',
                  HINT = 'insert a transaction''s entries in one statement';
    END IF;
    RETURN NULL;
END $$;

DROP TRIGGER ledger_entries_balanced ON ledger_entries;

CREATE TRIGGER ledger_entries_balanced
    AFTER INSERT ON ledger_entries
    REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_statement_balanced();
