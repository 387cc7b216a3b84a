-- The order's instrument, and its fill priced in SQL: NUMERIC multiplies
-- exactly whatever the digits, and exact (the last column) says whether the
-- notional fits the ledger's 18 decimals without rounding. $1 is the symbol,
-- $2 the limit price (NULL: a market order, priced at the reference price),
-- $3 the quantity. No row: the instrument does not exist.
SELECT status = 'halted', base, quote,
    trim_scale(coalesce($2::numeric, reference_price))::text,
    trim_scale(coalesce($2::numeric, reference_price) * $3::numeric)::text,
    scale(trim_scale(coalesce($2::numeric, reference_price) * $3::numeric)) <= 18
FROM instruments WHERE symbol = $1
