-- Audit check trade_matches_entries (CheckTradeEntries): what a trade
-- implies, against what its ledger transaction (a `trade` transaction) holds,
-- summed per account, asset and part, the sums differing either way, one row
-- per trade, as (subject, detail). With n = quantity × price, a buy taker:
-- taker held quote −(n + taker fee), taker available base +quantity, maker
-- held base −quantity, maker available quote +(n − maker fee); a sell taker:
-- taker held base −quantity, taker available quote +(n − taker fee), maker
-- held quote −(n + maker fee), maker available base +quantity; both fees to
-- the venue's (orders.VenueAccount) available quote. Zero sums are left out.
WITH expected AS (
    SELECT trade_id, account_id, asset, part, sum(amount) AS amount
    FROM (
        SELECT t.id AS trade_id, x.account_id, x.asset, x.part, x.amount
        FROM trades t JOIN instruments i ON i.symbol = t.symbol,
        LATERAL (VALUES
            (t.taker_account_id, CASE t.taker_side WHEN 'buy' THEN i.quote ELSE i.base END, 'held',
                CASE t.taker_side WHEN 'buy' THEN -(t.quantity * t.price + t.taker_fee) ELSE -t.quantity END),
            (t.taker_account_id, CASE t.taker_side WHEN 'buy' THEN i.base ELSE i.quote END, 'available',
                CASE t.taker_side WHEN 'buy' THEN t.quantity ELSE t.quantity * t.price - t.taker_fee END),
            (t.maker_account_id, CASE t.taker_side WHEN 'buy' THEN i.base ELSE i.quote END, 'held',
                CASE t.taker_side WHEN 'buy' THEN -t.quantity ELSE -(t.quantity * t.price + t.maker_fee) END),
            (t.maker_account_id, CASE t.taker_side WHEN 'buy' THEN i.quote ELSE i.base END, 'available',
                CASE t.taker_side WHEN 'buy' THEN t.quantity * t.price - t.maker_fee ELSE t.quantity END),
            ('ACC_0000000000000000000000000V', i.quote, 'available', t.maker_fee + t.taker_fee)
        ) AS x(account_id, asset, part, amount)
    ) s
    GROUP BY 1, 2, 3, 4 HAVING sum(amount) <> 0
), actual AS (
    SELECT t.id AS trade_id, e.account_id, e.asset, e.part, sum(e.amount) AS amount
    FROM trades t
    JOIN ledger_transactions x ON x.id = t.ledger_transaction_id AND x.kind = 'trade'
    JOIN ledger_entries e ON e.transaction_id = x.id
    GROUP BY 1, 2, 3, 4 HAVING sum(e.amount) <> 0
), differing AS (
    (SELECT 'missing' AS what, * FROM expected EXCEPT ALL SELECT 'missing', * FROM actual)
    UNION ALL
    (SELECT 'unexpected', * FROM actual EXCEPT ALL SELECT 'unexpected', * FROM expected)
)
SELECT 'trade/' || trade_id, string_agg(format('%s %s %s %s %s', what, account_id, asset, part, trim_scale(amount)), '; '
    ORDER BY what, account_id, asset, part, amount)
FROM differing GROUP BY trade_id ORDER BY trade_id
