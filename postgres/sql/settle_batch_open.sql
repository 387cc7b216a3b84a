-- Opens the balance rows a settlement batch moves that do not exist yet:
-- each order's account ($1, parallel to the symbols $2) and the venue ($3),
-- in the base and the quote of the order's instrument. The rows are created
-- in (account, asset) order, the order of the locks taken next, so two
-- settlers opening the same new rows cannot deadlock. An account that does
-- not exist gets no row; its order finds no balances locked and is settled
-- alone, which refuses it.
INSERT INTO balances (account_id, asset)
SELECT DISTINCT owner.id, asset.code
FROM unnest($1::text[], $2::text[]) AS o(account_id, symbol)
JOIN instruments i ON i.symbol = o.symbol
CROSS JOIN LATERAL (VALUES (o.account_id), ($3::text)) AS owner(id)
CROSS JOIN LATERAL (VALUES (i.base), (i.quote)) AS asset(code)
JOIN accounts a ON a.id = owner.id
ORDER BY owner.id, asset.code
ON CONFLICT DO NOTHING
