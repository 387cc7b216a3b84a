-- Audit check trade_within_limits (CheckTradeLimits): every trade outside
-- either order's limit or not between the orders it names, as (subject,
-- detail): the buy's limit price must be at or above the trade price, the
-- sell's at or below it (a market order has no limit); the taker is on
-- taker_side, the maker on the other side, both of the trade's instrument.
SELECT 'trade/' || t.id, CASE
    WHEN tk.symbol <> t.symbol OR mk.symbol <> t.symbol
        THEN format('on %s, its taker is on %s and its maker on %s', t.symbol, tk.symbol, mk.symbol)
    WHEN tk.side <> t.taker_side OR mk.side = t.taker_side
        THEN format('taker side %s, its taker is a %s and its maker a %s', t.taker_side, tk.side, mk.side)
    ELSE format('at %s, above the buy %s limit %s or below the sell %s limit %s', trim_scale(t.price),
        buy.id, coalesce(trim_scale(buy.price)::text, 'none'), sell.id, coalesce(trim_scale(sell.price)::text, 'none'))
END
FROM trades t
JOIN orders tk ON tk.id = t.taker_order_id
JOIN orders mk ON mk.id = t.maker_order_id
JOIN orders buy ON buy.id = CASE t.taker_side WHEN 'buy' THEN t.taker_order_id ELSE t.maker_order_id END
JOIN orders sell ON sell.id = CASE t.taker_side WHEN 'buy' THEN t.maker_order_id ELSE t.taker_order_id END
WHERE tk.symbol <> t.symbol OR mk.symbol <> t.symbol
   OR tk.side <> t.taker_side OR mk.side = t.taker_side
   OR buy.price < t.price OR sell.price > t.price
ORDER BY t.id
