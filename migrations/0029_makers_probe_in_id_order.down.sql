-- The makers' check as 0021 made it and their update as 0023 made it.
CREATE OR REPLACE FUNCTION settlement_makers_unchanged(ids TEXT[], remaining NUMERIC[], holds NUMERIC[])
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    stale TEXT;
BEGIN
    SELECT m.id INTO stale
    FROM unnest(ids, remaining, holds) AS m(id, remaining, hold)
    LEFT JOIN LATERAL (SELECT * FROM orders WHERE orders.id = m.id OFFSET 0) AS o ON true
    WHERE o.id IS NULL OR o.status NOT IN ('open', 'partially_filled')
        OR o.quantity - o.filled_quantity <> m.remaining OR o.hold <> m.hold
    LIMIT 1;
    IF stale IS NOT NULL THEN
        RAISE EXCEPTION 'SETTLESTALE: resting order % is not as the owner''s book has it', stale;
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION settlement_update_makers(ids TEXT[], quantities NUMERIC[], notionals NUMERIC[], fees_paid NUMERIC[],
    holds NUMERIC[], statuses TEXT[], cancel_reasons TEXT[])
RETURNS void
LANGUAGE plpgsql
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
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
    WHERE o.id = m.id;
END
$$;
