-- Audit check settlement_matches_fill (CheckSettlementEntries): what the
-- fill of an order settled before the market implies (against the venue,
-- available parts only), against what its settlement transaction holds: the
-- entries differing either way, one row per order, as (subject, detail). The
-- venue's id is orders.VenueAccount, the one the schema seeds.
WITH expected AS (
    SELECT o.id AS order_id, x.account_id, x.asset, x.part, x.amount
    FROM orders o JOIN instruments i ON i.symbol = o.symbol
    -- an order without its own settlement is settled_order_has_transaction's
    JOIN ledger_transactions t ON t.id = o.ledger_transaction_id AND t.kind = 'settlement' AND t.order_id = o.id,
    LATERAL (VALUES
        (o.account_id, i.base, 'available', CASE o.side WHEN 'buy' THEN o.fill_quantity ELSE -o.fill_quantity END),
        (o.account_id, i.quote, 'available', CASE o.side WHEN 'buy' THEN -o.fill_notional ELSE o.fill_notional END),
        ('ACC_0000000000000000000000000V', i.base, 'available', CASE o.side WHEN 'buy' THEN -o.fill_quantity ELSE o.fill_quantity END),
        ('ACC_0000000000000000000000000V', i.quote, 'available', CASE o.side WHEN 'buy' THEN o.fill_notional ELSE -o.fill_notional END)
    ) AS x(account_id, asset, part, amount)
), actual AS (
    SELECT t.order_id, e.account_id, e.asset, e.part, e.amount
    FROM ledger_transactions t JOIN ledger_entries e ON e.transaction_id = t.id
    JOIN orders o ON o.id = t.order_id AND o.ledger_transaction_id = t.id
    WHERE t.kind = 'settlement'
), differing AS (
    (SELECT 'missing' AS what, * FROM expected EXCEPT ALL SELECT 'missing', * FROM actual)
    UNION ALL
    (SELECT 'unexpected', * FROM actual EXCEPT ALL SELECT 'unexpected', * FROM expected)
)
SELECT order_id, string_agg(format('%s entry %s %s %s %s', what, account_id, asset, part, trim_scale(amount)), '; '
    ORDER BY what, account_id, asset, part, amount)
FROM differing GROUP BY order_id ORDER BY order_id
