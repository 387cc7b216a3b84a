-- The order $1 as a cancel needs it, read under its instrument's lock:
-- status, the asset its hold is in (quote for a buy, base for a sell) and
-- the hold (trimmed NUMERIC text).
SELECT o.status, CASE o.side WHEN 'buy' THEN i.quote ELSE i.base END, trim_scale(o.hold)::text
FROM orders o JOIN instruments i ON i.symbol = o.symbol
WHERE o.id = $1
