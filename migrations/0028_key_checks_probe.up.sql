-- The key checks of 0016 probe each key, on the statistics of a fresh
-- database too (issue 24). Each check is a query of a statement trigger's
-- transition table against the referenced table, and PL/pgSQL keeps its
-- plan for the connection's life; a worker makes it on its first write, in
-- a fresh database against tables of a few rows. With 0016's settings (no
-- sequential scan, hash or merge join) the planner could still read such a
-- table whole, once, through any of its indexes, keep it and compare every
-- key against it (a nested loop over a materialized scan): the trades'
-- check of their orders did, and went on reading the whole orders table on
-- every write that traded as the table grew (docs/performance.md, "Where
-- the matching time goes"). OFFSET 0 keeps each NOT EXISTS a subquery of
-- its own, which PostgreSQL does not turn into a join: it runs
-- per key.
-- The orders' probe asks for its key in id order: orders_account_newest
-- and orders_account_status_newest hold id too, as a later column, and on
-- statistics of an orders table of one row a probe "id = key" through
-- them costs what one through orders_pkey does; the planner took the
-- newest, and each key read that index whole. Only orders_pkey gives the
-- order without a sort (with "id = key" the order would go unasked, hence
-- the two bounds).
-- The bodies are 0016's otherwise.

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
         WHERE NOT EXISTS (SELECT FROM ledger_transactions t WHERE t.id = i.transaction_id OFFSET 0) LIMIT 1)
        UNION ALL
        (SELECT format('balance (%s, %s)', i.account_id, i.asset)
         FROM (SELECT DISTINCT account_id, asset FROM inserted) i
         WHERE NOT EXISTS (SELECT FROM balances b WHERE b.account_id = i.account_id AND b.asset = i.asset OFFSET 0) LIMIT 1)
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
         WHERE NOT EXISTS (SELECT FROM instruments x WHERE x.symbol = i.symbol OFFSET 0) LIMIT 1)
        UNION ALL
        (SELECT 'account ' || i.account_id
         FROM (SELECT maker_account_id AS account_id FROM inserted UNION SELECT taker_account_id FROM inserted) i
         WHERE NOT EXISTS (SELECT FROM accounts a WHERE a.id = i.account_id OFFSET 0) LIMIT 1)
        UNION ALL
        (SELECT 'order ' || i.order_id
         FROM (SELECT maker_order_id AS order_id FROM inserted UNION ALL SELECT taker_order_id FROM inserted) i
         WHERE NOT EXISTS (SELECT FROM orders o WHERE o.id >= i.order_id AND o.id <= i.order_id
                           ORDER BY o.id LIMIT 1 OFFSET 0) LIMIT 1)
        UNION ALL
        (SELECT 'ledger transaction ' || i.ledger_transaction_id
         FROM inserted i
         WHERE NOT EXISTS (SELECT FROM ledger_transactions t WHERE t.id = i.ledger_transaction_id OFFSET 0) LIMIT 1)
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
    WHERE NOT EXISTS (SELECT FROM accounts a WHERE a.id = i.account_id OFFSET 0) LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'orders: % does not exist', missing
            USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'orders_account_id_fkey';
    END IF;
    SELECT 'instrument ' || i.symbol INTO missing
    FROM (SELECT DISTINCT symbol FROM inserted) i
    WHERE NOT EXISTS (SELECT FROM instruments x WHERE x.symbol = i.symbol OFFSET 0) LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'orders: % does not exist', missing
            USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'orders_symbol_fkey';
    END IF;
    RETURN NULL;
END $$;
