-- One page of an account's fills, newest first: the trades it was the maker
-- or the taker of, each from its side (its order, its fee, its liquidity).
-- A trade never has one account on both sides (self-trade prevention, and
-- trades' CHECK), so the branches never return a trade twice.
-- $1 account id; $2 the cursor: only trades with id < $2 (the first page
-- passes the largest bigint); $3 an order id of the account to keep only its
-- trades, or NULL for every trade; $4 the most rows.
-- Rows: trade id, the account's order id, symbol, liquidity ('maker' or
-- 'taker'), the taker's side, price, quantity, the account's fee (trimmed
-- NUMERIC text), created_at, the decimals of the tick size, the lot size and
-- the quote asset, and the quote asset (the fee's).
-- Plans: the statement is prepared once, and a generic plan cannot choose
-- its indexes by whether $3 is given, so each case has its own branches
-- (not "$3 IS NULL OR maker_order_id = $3", whose generic plan walks the
-- account's whole history to find one order's trades). Without $3, the
-- account branches are range scans of trades_maker_account and
-- trades_taker_account, newest first; the order branches find nothing for
-- a NULL key. With $3, the account branches stop at their one-time filter
-- and the order branches read trades_maker / trades_taker; their account
-- check comes after the LIMIT so it cannot draw in the account index (one
-- order's trades all have its account on its side: all pass, or none).
WITH mine AS (
    (SELECT id, maker_order_id AS order_id, 'maker' AS liquidity, maker_fee AS fee,
         symbol, taker_side, price, quantity, created_at
     FROM trades WHERE maker_account_id = $1 AND id < $2 AND $3::text IS NULL
     ORDER BY id DESC LIMIT $4)
    UNION ALL
    (SELECT id, taker_order_id, 'taker', taker_fee, symbol, taker_side, price, quantity, created_at
     FROM trades WHERE taker_account_id = $1 AND id < $2 AND $3::text IS NULL
     ORDER BY id DESC LIMIT $4)
    UNION ALL
    (SELECT id, order_id, liquidity, fee, symbol, taker_side, price, quantity, created_at FROM (
        SELECT id, maker_order_id, 'maker', maker_fee, symbol, taker_side, price, quantity, created_at, maker_account_id
        FROM trades WHERE maker_order_id = $3 AND id < $2
        ORDER BY id DESC LIMIT $4) AS maker_side (id, order_id, liquidity, fee, symbol, taker_side, price, quantity, created_at, account)
     WHERE account = $1)
    UNION ALL
    (SELECT id, order_id, liquidity, fee, symbol, taker_side, price, quantity, created_at FROM (
        SELECT id, taker_order_id, 'taker', taker_fee, symbol, taker_side, price, quantity, created_at, taker_account_id
        FROM trades WHERE taker_order_id = $3 AND id < $2
        ORDER BY id DESC LIMIT $4) AS taker_side (id, order_id, liquidity, fee, symbol, taker_side, price, quantity, created_at, account)
     WHERE account = $1)
)
SELECT m.id, m.order_id, m.symbol, m.liquidity, m.taker_side,
    trim_scale(m.price)::text, trim_scale(m.quantity)::text, trim_scale(m.fee)::text, m.created_at,
    scale(trim_scale(i.tick_size)), scale(trim_scale(i.lot_size)), q.scale, i.quote
FROM mine m
JOIN instruments i ON i.symbol = m.symbol
JOIN assets q ON q.code = i.quote
ORDER BY m.id DESC
LIMIT $4
