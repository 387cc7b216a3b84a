-- Writes what a settlement batch decided, in one statement: the orders' final
-- rows ($1..$15, parallel arrays, one element per order), one ledger
-- transaction per settled order ($16, $17), its entries ($18..$21), each
-- moved balance once with the sum of its entries and its version raised by
-- their count, and one outbox row per moved balance at its final
-- version ($22..$24), which it returns.
--
-- The orders insert has no ON CONFLICT: the batch dropped the orders that had
-- a final row while it held their balance locks, so a row found now was
-- written by something that takes no balance lock (a cancel after the lease
-- was lost). The insert then fails the statement, the transaction rolls
-- back, and the orders are settled one by one, where ON CONFLICT decides.
WITH placed AS (
    INSERT INTO orders (id, account_id, client_order_id, symbol, side, type, quantity, price, status,
        reject_reason, fill_price, fill_quantity, fill_notional, ledger_transaction_id, settled_by_token, created_at)
    SELECT o.id, o.account_id, o.client_order_id, o.symbol, o.side, o.type, o.quantity, o.price, o.status,
        o.reject_reason, o.fill_price, CASE WHEN o.status = 'settled' THEN o.quantity END, o.fill_notional,
        o.ledger_transaction_id, o.settled_by_token, o.created_at
    FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::numeric[],
            $8::numeric[], $9::text[], $10::text[], $11::numeric[], $12::numeric[], $13::bigint[], $14::bigint[],
            $15::timestamptz[])
        AS o(id, account_id, client_order_id, symbol, side, type, quantity, price, status, reject_reason,
             fill_price, fill_notional, ledger_transaction_id, settled_by_token, created_at)
), transactions AS (
    INSERT INTO ledger_transactions (id, kind, order_id) OVERRIDING SYSTEM VALUE
    SELECT t.id, 'settlement', t.order_id FROM unnest($16::bigint[], $17::text[]) AS t(id, order_id)
), moves AS (
    SELECT * FROM unnest($18::bigint[], $19::text[], $20::text[], $21::numeric[])
        AS m(transaction_id, account_id, asset, amount)
), entries AS (
    INSERT INTO ledger_entries (transaction_id, account_id, asset, amount)
    SELECT transaction_id, account_id, asset, amount FROM moves
), moved AS (
    UPDATE balances b SET available = b.available + m.total, version = b.version + m.entries
    FROM (SELECT account_id, asset, sum(amount) AS total, count(*) AS entries
          FROM moves GROUP BY account_id, asset) AS m
    WHERE b.account_id = m.account_id AND b.asset = m.asset
)
INSERT INTO outbox (name, version, payload)
SELECT * FROM unnest($22::text[], $23::bigint[], $24::text[])
RETURNING id, name, version, payload
