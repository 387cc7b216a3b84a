-- The owner's check of its batch's makers (settlement_makers_unchanged,
-- 0021) probes each id in id order, as 0028's key check of trades does:
-- on statistics of an orders table of one row, "orders.id = key" through
-- orders_account_status_newest (id its third column) costs what a probe of
-- orders_pkey does, the planner took it, and PL/pgSQL kept that plan for
-- the connection's life: each maker read that index whole as the table
-- grew. Only orders_pkey gives id order without a sort. Sequential scans
-- are priced out by the owner's fence (settle_owned_fence.sql), for the
-- write's transaction. The body is 0021's otherwise.
CREATE OR REPLACE FUNCTION settlement_makers_unchanged(ids TEXT[], remaining NUMERIC[], holds NUMERIC[])
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    stale TEXT;
BEGIN
    SELECT m.id INTO stale
    FROM unnest(ids, remaining, holds) AS m(id, remaining, hold)
    LEFT JOIN LATERAL (SELECT * FROM orders WHERE orders.id >= m.id AND orders.id <= m.id
                       ORDER BY orders.id LIMIT 1 OFFSET 0) AS o ON true
    WHERE o.id IS NULL OR o.status NOT IN ('open', 'partially_filled')
        OR o.quantity - o.filled_quantity <> m.remaining OR o.hold <> m.hold
    LIMIT 1;
    IF stale IS NOT NULL THEN
        RAISE EXCEPTION 'SETTLESTALE: resting order % is not as the owner''s book has it', stale;
    END IF;
END
$$;

-- settle_update_makers.sql's update (0023) finds each maker by the
-- ordered probe above and locks it, then updates the rows it locked by
-- their addresses. As "o.id = m.id" the planner, on statistics of a
-- one-row orders table, read orders_pkey whole in id order (a path as
-- cheap there as probing each maker) and kept that plan for the
-- connection's life; a probe bounded on id without the order ties with
-- orders_account_status_newest as above. The lock comes first, as the
-- update took it, so the second statement, with a snapshot of its own,
-- sees each maker as it stands and nobody changes it in between; a maker
-- without a row is skipped, as the update skipped it.
-- The update is 0023's otherwise.
CREATE OR REPLACE FUNCTION settlement_update_makers(ids TEXT[], quantities NUMERIC[], notionals NUMERIC[], fees_paid NUMERIC[],
    holds NUMERIC[], statuses TEXT[], cancel_reasons TEXT[])
RETURNS void
LANGUAGE plpgsql
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    rows_at TID[];
BEGIN
    SELECT array_agg(r.at ORDER BY m.position) INTO rows_at
    FROM unnest(ids) WITH ORDINALITY AS m(id, position)
    LEFT JOIN LATERAL (SELECT o.ctid AS at FROM orders o WHERE o.id >= m.id AND o.id <= m.id
                       ORDER BY o.id LIMIT 1 FOR NO KEY UPDATE) AS r ON true;
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
    FROM unnest(rows_at, quantities, notionals, fees_paid, holds, statuses, cancel_reasons)
        AS m(at, quantity, notional, fees, hold, status, cancel_reason)
    WHERE o.ctid = m.at;
END
$$;
