-- One row per order of a settlement batch, in the batch's order ($1..$3 are
-- parallel arrays): whether its instrument exists and is halted, the assets
-- it moves, and its fill priced in NUMERIC, which multiplies exactly whatever
-- the digits; exact says whether the notional fits the ledger's 18 decimals
-- without rounding. Each order also draws the id its ledger transaction will
-- have if it settles: the settled row must name it, and drawing it here keeps
-- the writes to one statement. An id left unused is a gap in the sequence,
-- as a rollback leaves one.
SELECT o.n,
       i.symbol IS NOT NULL,
       coalesce(i.status = 'halted', false),
       coalesce(i.base, ''),
       coalesce(i.quote, ''),
       coalesce(trim_scale(coalesce(o.price, i.reference_price))::text, ''),
       trim_scale(o.quantity)::text,
       coalesce(trim_scale(coalesce(o.price, i.reference_price) * o.quantity)::text, ''),
       coalesce(scale(trim_scale(coalesce(o.price, i.reference_price) * o.quantity)) <= 18, false),
       nextval(pg_get_serial_sequence('ledger_transactions', 'id'))
FROM unnest($1::text[], $2::numeric[], $3::numeric[]) WITH ORDINALITY AS o(symbol, price, quantity, n)
LEFT JOIN instruments i ON i.symbol = o.symbol
ORDER BY o.n
