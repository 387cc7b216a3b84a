-- The check as migration 0015 made it: the ids joined to orders.
CREATE OR REPLACE FUNCTION settlement_makers_unchanged(ids TEXT[], remaining NUMERIC[], holds NUMERIC[])
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    stale TEXT;
BEGIN
    SELECT m.id INTO stale
    FROM unnest(ids, remaining, holds) AS m(id, remaining, hold)
    LEFT JOIN orders o ON o.id = m.id
    WHERE o.id IS NULL OR o.status NOT IN ('open', 'partially_filled')
        OR o.quantity - o.filled_quantity <> m.remaining OR o.hold <> m.hold
    LIMIT 1;
    IF stale IS NOT NULL THEN
        RAISE EXCEPTION 'SETTLESTALE: resting order % is not as the owner''s book has it', stale;
    END IF;
END
$$;
