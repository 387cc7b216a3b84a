-- Audit check settled_order_has_transaction (CheckSettledOrder): every order
-- settled before the market (it has a fill_price or a ledger transaction)
-- that lacks its one settlement transaction, is not filled, or whose fill
-- does not add up, as (subject, detail). The schema lets such a row point at
-- any transaction; this holds it to its own settlement, and its fill to the
-- whole quantity at its limit price, notional = price × quantity.
SELECT o.id, CASE
    WHEN t.id IS NULL THEN 'settled without a ledger transaction'
    WHEN t.kind <> 'settlement' OR t.order_id IS DISTINCT FROM o.id
        THEN format('points at txn/%s, a %s%s', t.id, t.kind, ' of order ' || t.order_id)
    WHEN o.status <> 'filled' THEN format('settled, yet %s', o.status)
    WHEN o.fill_quantity IS DISTINCT FROM o.quantity THEN format('filled %s of %s', trim_scale(o.fill_quantity), trim_scale(o.quantity))
    WHEN o.type = 'limit' AND o.fill_price IS DISTINCT FROM o.price THEN format('limit %s filled at %s', trim_scale(o.price), trim_scale(o.fill_price))
    ELSE format('notional %s is not %s × %s', trim_scale(o.fill_notional), trim_scale(o.fill_price), trim_scale(o.fill_quantity))
END
FROM orders o LEFT JOIN ledger_transactions t ON t.id = o.ledger_transaction_id
WHERE (o.ledger_transaction_id IS NOT NULL OR o.fill_price IS NOT NULL)
  AND (t.id IS NULL OR t.kind <> 'settlement' OR t.order_id IS DISTINCT FROM o.id OR o.status <> 'filled'
    OR o.fill_quantity IS DISTINCT FROM o.quantity OR (o.type = 'limit' AND o.fill_price IS DISTINCT FROM o.price)
    OR o.fill_notional IS DISTINCT FROM o.fill_price * o.fill_quantity)
ORDER BY o.id
