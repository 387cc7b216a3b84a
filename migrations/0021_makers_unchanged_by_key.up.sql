-- The owner's check of the makers its batch fills or cancels
-- (settlement_makers_unchanged, 0015) reads each order by its key (issue
-- 24). It joined the ids to orders, and PL/pgSQL keeps the plan it first
-- made for that join: made while orders was young (a worker's first
-- batches, a fresh database), it scanned the whole table on every batch,
-- a cost that grows with the table (92 of the profiled bench run's 81
-- batches scanned orders whole, 1.3 ms a call). Each id is now looked up
-- through orders_pkey, in a lateral subquery the planner cannot turn into
-- a scan, whatever the statistics.
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
