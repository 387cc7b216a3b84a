-- The key checks as 0016 wrote them, planned as joins.

CREATE OR REPLACE FUNCTION ledger_entries_referenced() RETURNS trigger
LANGUAGE plpgsql
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
AS $$
DECLARE
    missing TEXT;
BEGIN
    SELECT m INTO missing FROM (
        (SELECT 'ledger transaction ' || i.transaction_id AS m
         FROM (SELECT DISTINCT transaction_id FROM inserted) i
         WHERE NOT EXISTS (SELECT FROM ledger_transactions t WHERE t.id = i.transaction_id) LIMIT 1)
        UNION ALL
        (SELECT format('balance (%s, %s)', i.account_id, i.asset)
         FROM (SELECT DISTINCT account_id, asset FROM inserted) i
         WHERE NOT EXISTS (SELECT FROM balances b WHERE b.account_id = i.account_id AND b.asset = i.asset) LIMIT 1)
    ) missing LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'ledger_entries: % does not exist', missing USING ERRCODE = 'foreign_key_violation';
    END IF;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION trades_referenced() RETURNS trigger
LANGUAGE plpgsql
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
AS $$
DECLARE
    missing TEXT;
BEGIN
    SELECT m INTO missing FROM (
        (SELECT 'instrument ' || i.symbol AS m
         FROM (SELECT DISTINCT symbol FROM inserted) i
         WHERE NOT EXISTS (SELECT FROM instruments x WHERE x.symbol = i.symbol) LIMIT 1)
        UNION ALL
        (SELECT 'account ' || i.account_id
         FROM (SELECT maker_account_id AS account_id FROM inserted UNION SELECT taker_account_id FROM inserted) i
         WHERE NOT EXISTS (SELECT FROM accounts a WHERE a.id = i.account_id) LIMIT 1)
        UNION ALL
        (SELECT 'order ' || i.order_id
         FROM (SELECT maker_order_id AS order_id FROM inserted UNION ALL SELECT taker_order_id FROM inserted) i
         WHERE NOT EXISTS (SELECT FROM orders o WHERE o.id = i.order_id) LIMIT 1)
        UNION ALL
        (SELECT 'ledger transaction ' || i.ledger_transaction_id
         FROM inserted i
         WHERE NOT EXISTS (SELECT FROM ledger_transactions t WHERE t.id = i.ledger_transaction_id) LIMIT 1)
    ) missing LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'trades: % does not exist', missing USING ERRCODE = 'foreign_key_violation';
    END IF;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION orders_referenced() RETURNS trigger
LANGUAGE plpgsql
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
AS $$
DECLARE
    missing TEXT;
BEGIN
    -- Settlement buries an order of an unknown account by this constraint
    -- name (postgres/settle.go, classify), as it did the foreign key's.
    SELECT 'account ' || i.account_id INTO missing
    FROM (SELECT DISTINCT account_id FROM inserted) i
    WHERE NOT EXISTS (SELECT FROM accounts a WHERE a.id = i.account_id) LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'orders: % does not exist', missing
            USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'orders_account_id_fkey';
    END IF;
    SELECT 'instrument ' || i.symbol INTO missing
    FROM (SELECT DISTINCT symbol FROM inserted) i
    WHERE NOT EXISTS (SELECT FROM instruments x WHERE x.symbol = i.symbol) LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'orders: % does not exist', missing
            USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'orders_symbol_fkey';
    END IF;
    RETURN NULL;
END $$;
