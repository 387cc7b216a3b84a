-- How many trades the market made, and how many orders traded in one at
-- least (as maker or taker).
SELECT count(*), (SELECT count(DISTINCT o) FROM trades, LATERAL (VALUES (maker_order_id), (taker_order_id)) AS v(o))
FROM trades
