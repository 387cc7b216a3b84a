-- Writes a settlement batch's ledger transactions, their entries and its
-- trades in one statement. The batch names a transaction by its position
-- (1-based) in the order it decided them; ids are drawn here, ascending in
-- that order, from the identity's sequence named as such (looked up once at
-- parse time, not per row as pg_get_serial_sequence would be).
--   $1 kinds (hold, release, trade), $2 the order each is for (the taker of
--      a trade): one per transaction.
--   $3..$7 entries: transaction position, account, asset, signed amount,
--      part (available or held).
--   $8..$20 trades: transaction position, symbol, maker order, taker order,
--      maker account, taker account, taker side, price, quantity, maker
--      fee, taker fee, and the maker and taker fee rates in basis points
--      the fees were computed at.
--   $21 symbols, $22 the last trade price of each: the instruments' last
--      prices, set only where they move (a write of the instrument row
--      leaves a version of it that every later probe of the row walks while
--      an older snapshot needs it). Empty when the batch traded nothing.
--      Here rather than in a statement of its own: one statement less a
--      write.
-- Returns nothing. The balances the entries move are moved by
-- settle_move_balances.sql; each transaction's entries are checked to
-- balance by this statement's trigger (ledger_entries_balanced, 0014).
WITH drawn AS MATERIALIZED (
    SELECT t.position, t.kind, t.order_id, nextval('ledger_transactions_id_seq') AS id
    FROM (SELECT * FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS t(kind, order_id, position)
          ORDER BY position) AS t
), transactions AS (
    INSERT INTO ledger_transactions (id, kind, order_id) OVERRIDING SYSTEM VALUE
    SELECT id, kind, order_id FROM drawn ORDER BY position
), entries AS (
    INSERT INTO ledger_entries (transaction_id, account_id, asset, amount, part)
    SELECT d.id, e.account_id, e.asset, e.amount, e.part
    FROM unnest($3::bigint[], $4::text[], $5::text[], $6::numeric[], $7::text[]) WITH ORDINALITY
        AS e(transaction, account_id, asset, amount, part, position)
    JOIN drawn d ON d.position = e.transaction
    ORDER BY e.position
), last_prices AS (
    UPDATE instruments i SET last_price = p.price
    FROM unnest($21::text[], $22::numeric[]) AS p(symbol, price)
    WHERE i.symbol = p.symbol AND i.last_price IS DISTINCT FROM p.price
)
INSERT INTO trades (symbol, maker_order_id, taker_order_id, maker_account_id, taker_account_id, taker_side,
    price, quantity, maker_fee, taker_fee, ledger_transaction_id, maker_fee_bps, taker_fee_bps)
SELECT t.symbol, t.maker_order_id, t.taker_order_id, t.maker_account_id, t.taker_account_id, t.taker_side,
    t.price, t.quantity, t.maker_fee, t.taker_fee, d.id, t.maker_fee_bps, t.taker_fee_bps
FROM unnest($8::bigint[], $9::text[], $10::text[], $11::text[], $12::text[], $13::text[], $14::text[],
        $15::numeric[], $16::numeric[], $17::numeric[], $18::numeric[], $19::numeric[], $20::numeric[]) WITH ORDINALITY
    AS t(transaction, symbol, maker_order_id, taker_order_id, maker_account_id, taker_account_id, taker_side,
         price, quantity, maker_fee, taker_fee, maker_fee_bps, taker_fee_bps, position)
JOIN drawn d ON d.position = t.transaction
ORDER BY t.position
