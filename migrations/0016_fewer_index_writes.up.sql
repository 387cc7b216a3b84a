-- Fewer index writes per order (issue 24, point 4). Every order inserts a
-- row into every index of orders, and every ledger entry into every index
-- of ledger_entries; these three indexed nothing a query needs:
--
-- - orders.sequence and orders.ledger_transaction_id were UNIQUE
--   constraints, whose indexes take an entry for every row, NULL included:
--   a sequence only while the order rests, a ledger transaction only for an
--   order settled before the market (0005). Partial unique indexes keep the
--   rule for the rows that have one, and leave the rest out.
-- - ledger_entries_balance (account_id, asset): no query reads entries by
--   balance (the audits aggregate the whole table), and the foreign key to
--   balances needs it only when a balance row is deleted or rekeyed, which
--   nothing does.
ALTER TABLE orders DROP CONSTRAINT orders_sequence_key;
CREATE UNIQUE INDEX orders_sequence ON orders (sequence) WHERE sequence IS NOT NULL;

ALTER TABLE orders DROP CONSTRAINT orders_ledger_transaction_id_key;
CREATE UNIQUE INDEX orders_ledger_transaction ON orders (ledger_transaction_id) WHERE ledger_transaction_id IS NOT NULL;

DROP INDEX ledger_entries_balance;

-- The keys of the rows a settlement batch inserts, checked per statement
-- instead of per row. A foreign key checks each inserted row with a query
-- of its own that locks the referenced row (FOR KEY SHARE: a write to its
-- page and the WAL, and a MultiXact when another transaction holds it too):
-- per order ≈ 14 of them (docs/performance.md, "Where the matching time
-- goes"), on rows every batch of every instrument shares (accounts,
-- instruments, balances). Here each inserting statement checks its new
-- rows at its end, in one query over its transition table and without
-- locks; the lock was what kept a referenced row from going away before
-- the commit, and instead these rows never go: ledger transactions are
-- append-only (0001; a truncate is refused by the orders' key to them and
-- the truncate trigger on orders), accounts, instruments and balances
-- refuse deletes and key changes (no writer does either), and an order
-- refuses them while a trade names it, after waiting for the trades in
-- flight. An update of a checked column is checked by a row
-- trigger (none of the writers updates one). The checks probe the
-- referenced tables' keys row by row, never scan them: a batch's statement
-- names a few hundred rows, the tables hold millions (the planner, which
-- sees a small table in a fresh database, would otherwise hash it whole).
ALTER TABLE ledger_entries DROP CONSTRAINT ledger_entries_transaction_id_fkey,
    DROP CONSTRAINT ledger_entries_account_id_asset_fkey;
ALTER TABLE trades DROP CONSTRAINT trades_symbol_fkey, DROP CONSTRAINT trades_maker_order_id_fkey,
    DROP CONSTRAINT trades_taker_order_id_fkey, DROP CONSTRAINT trades_maker_account_id_fkey,
    DROP CONSTRAINT trades_taker_account_id_fkey, DROP CONSTRAINT trades_ledger_transaction_id_fkey;
ALTER TABLE orders DROP CONSTRAINT orders_account_id_fkey, DROP CONSTRAINT orders_symbol_fkey;

CREATE FUNCTION ledger_entries_referenced() RETURNS trigger
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

CREATE TRIGGER ledger_entries_referenced
    AFTER INSERT ON ledger_entries
    REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_entries_referenced();

CREATE FUNCTION trades_referenced() RETURNS trigger
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

CREATE TRIGGER trades_referenced
    AFTER INSERT ON trades
    REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION trades_referenced();

CREATE FUNCTION orders_referenced() RETURNS trigger
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

CREATE TRIGGER orders_referenced
    AFTER INSERT ON orders
    REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION orders_referenced();

-- An update of a checked column, row by row (no writer makes one).
CREATE FUNCTION keys_updated_referenced() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    ok BOOLEAN;
BEGIN
    CASE TG_TABLE_NAME
    WHEN 'orders' THEN
        ok := EXISTS (SELECT FROM accounts WHERE id = NEW.account_id)
              AND EXISTS (SELECT FROM instruments WHERE symbol = NEW.symbol);
    WHEN 'trades' THEN
        ok := EXISTS (SELECT FROM instruments WHERE symbol = NEW.symbol)
              AND EXISTS (SELECT FROM accounts WHERE id = NEW.maker_account_id)
              AND EXISTS (SELECT FROM accounts WHERE id = NEW.taker_account_id)
              AND EXISTS (SELECT FROM orders WHERE id = NEW.maker_order_id)
              AND EXISTS (SELECT FROM orders WHERE id = NEW.taker_order_id)
              AND EXISTS (SELECT FROM ledger_transactions WHERE id = NEW.ledger_transaction_id);
    END CASE;
    IF NOT ok THEN
        RAISE EXCEPTION '%: row % refers to a row that does not exist', TG_TABLE_NAME, NEW
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER orders_keys_updated BEFORE UPDATE OF account_id, symbol ON orders
    FOR EACH ROW EXECUTE FUNCTION keys_updated_referenced();
CREATE TRIGGER trades_keys_updated
    BEFORE UPDATE OF symbol, maker_account_id, taker_account_id, maker_order_id, taker_order_id, ledger_transaction_id
    ON trades FOR EACH ROW EXECUTE FUNCTION keys_updated_referenced();

-- The referenced rows stay: no delete, no new key, no truncate.
CREATE FUNCTION referenced_rows_stay() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_LEVEL = 'ROW' AND TG_TABLE_NAME = 'orders' THEN
        -- An order goes only while no trade names it.
        IF TG_OP = 'DELETE' OR NEW.id IS DISTINCT FROM OLD.id THEN
            IF EXISTS (SELECT FROM trades WHERE maker_order_id = OLD.id)
               OR EXISTS (SELECT FROM trades WHERE taker_order_id = OLD.id) THEN
                RAISE EXCEPTION 'orders: order % has trades; % refused', OLD.id, TG_OP
                    USING ERRCODE = 'foreign_key_violation';
            END IF;
        END IF;
        RETURN coalesce(NEW, OLD);
    END IF;
    RAISE EXCEPTION '% on % refused: ledger entries, orders and trades refer to its rows', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'foreign_key_violation';
END $$;

CREATE TRIGGER accounts_stay BEFORE DELETE OR UPDATE OF id ON accounts
    FOR EACH ROW EXECUTE FUNCTION referenced_rows_stay();
CREATE TRIGGER accounts_stay_truncate BEFORE TRUNCATE ON accounts
    FOR EACH STATEMENT EXECUTE FUNCTION referenced_rows_stay();
CREATE TRIGGER instruments_stay BEFORE DELETE OR UPDATE OF symbol ON instruments
    FOR EACH ROW EXECUTE FUNCTION referenced_rows_stay();
CREATE TRIGGER instruments_stay_truncate BEFORE TRUNCATE ON instruments
    FOR EACH STATEMENT EXECUTE FUNCTION referenced_rows_stay();
CREATE TRIGGER balances_stay BEFORE DELETE OR UPDATE OF account_id, asset ON balances
    FOR EACH ROW EXECUTE FUNCTION referenced_rows_stay();
CREATE TRIGGER balances_stay_truncate BEFORE TRUNCATE ON balances
    FOR EACH STATEMENT EXECUTE FUNCTION referenced_rows_stay();
-- A trade's check takes no lock on the orders it names, so a delete waits
-- first for every trade insert in flight (SHARE conflicts with their ROW
-- EXCLUSIVE) and then sees their trades: what the foreign key's KEY SHARE
-- lock did per row. Deletes of orders are rare (nothing at run time makes
-- one); the inserts never wait for this.
CREATE FUNCTION orders_delete_waits_for_trades() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    LOCK TABLE trades IN SHARE MODE;
    RETURN NULL;
END $$;

CREATE TRIGGER orders_delete_waits BEFORE DELETE OR UPDATE OF id ON orders
    FOR EACH STATEMENT EXECUTE FUNCTION orders_delete_waits_for_trades();
CREATE TRIGGER orders_stay BEFORE DELETE OR UPDATE OF id ON orders
    FOR EACH ROW EXECUTE FUNCTION referenced_rows_stay();
CREATE TRIGGER orders_stay_truncate BEFORE TRUNCATE ON orders
    FOR EACH STATEMENT EXECUTE FUNCTION referenced_rows_stay();
