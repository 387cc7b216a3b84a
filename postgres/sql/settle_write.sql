-- Writes a settled order in one statement: its final row ($1..$12: the
-- order, $9 the fill price, $10 the notional, $11 the settling lease's
-- token), its ledger transaction, the entries of its moves ($13..$15,
-- parallel arrays: account, asset, amount), each moved balance, and one
-- outbox row per balance ($16..$18: name, version, payload), which it
-- returns with the transaction's id.
--
-- Every write hangs on placed, the order's insert: when the order has its row
-- already, the statement changes nothing at all. The ledger transaction's id
-- is drawn first because the settled row must name it.
WITH drawn AS (
    SELECT nextval(pg_get_serial_sequence('ledger_transactions', 'id')) AS id
), placed AS (
    INSERT INTO orders (id, account_id, client_order_id, symbol, side, type, quantity, price, status,
        fill_price, fill_quantity, fill_notional, ledger_transaction_id, settled_by_token, created_at)
    SELECT $1, $2, $3, $4, $5, $6, $7, $8, 'settled', $9, $7, $10, drawn.id, $11, $12 FROM drawn
    ON CONFLICT (id) DO NOTHING
    RETURNING ledger_transaction_id AS id
), txn AS (
    INSERT INTO ledger_transactions (id, kind, order_id) OVERRIDING SYSTEM VALUE
    SELECT id, 'settlement', $1 FROM placed
    RETURNING id
), moves AS (
    SELECT * FROM unnest($13::text[], $14::text[], $15::numeric[]) AS m(account_id, asset, amount)
), entries AS (
    INSERT INTO ledger_entries (transaction_id, account_id, asset, amount)
    SELECT txn.id, m.account_id, m.asset, m.amount FROM txn, moves m
), moved AS (
    UPDATE balances b SET available = b.available + m.amount, version = b.version + 1
    FROM moves m, placed
    WHERE b.account_id = m.account_id AND b.asset = m.asset
)
INSERT INTO outbox (name, version, payload)
SELECT j.* FROM placed, unnest($16::text[], $17::bigint[], $18::text[]) AS j
RETURNING id, name, version, payload, (SELECT id FROM placed)
