-- A settlement batch's update of the makers it filled or canceled
-- (postgres/sql/settle_update_makers.sql) reads each order by its key
-- (issue 24). As "UPDATE orders ... FROM unnest(...) WHERE o.id = m.id" the
-- planner judged orders by its last ANALYZE, which in a run of
-- settlements lags its growth by far, and half the calls of the profiled
-- bench run (1,000 accounts) hashed the makers and scanned orders whole:
-- 5 ms a call for ~16 makers, a cost that grows with the table. An
-- UPDATE's target cannot be read through a lateral subquery, so the
-- statement runs here with scans and hash or merge joins priced out, as
-- the key checks of 0016 do: each maker is one probe of orders_pkey.
-- ids, quantities, notionals, fees_paid, holds, statuses, cancel_reasons: the
-- parallel arrays of settle_update_makers.sql, which says what they are.
CREATE FUNCTION settlement_update_makers(ids TEXT[], quantities NUMERIC[], notionals NUMERIC[], fees_paid NUMERIC[],
    holds NUMERIC[], statuses TEXT[], cancel_reasons TEXT[])
RETURNS void
LANGUAGE sql
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
AS $$
UPDATE orders o
SET filled_quantity = o.filled_quantity + m.quantity,
    filled_notional = o.filled_notional + m.notional,
    fees = o.fees + m.fees,
    hold = o.hold - m.hold,
    status = m.status,
    cancel_reason = coalesce(m.cancel_reason, o.cancel_reason),
    sequence = CASE WHEN m.status IN ('open', 'partially_filled') THEN o.sequence END,
    updated_at = now(),
    finished_at = CASE WHEN m.status IN ('open', 'partially_filled') THEN o.finished_at ELSE now() END
FROM unnest(ids, quantities, notionals, fees_paid, holds, statuses, cancel_reasons)
    AS m(id, quantity, notional, fees, hold, status, cancel_reason)
WHERE o.id = m.id
$$;
