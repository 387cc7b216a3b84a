-- A settlement batch decides on its takers' balances read without a lock,
-- then locks every row it writes, checks that the locked values still lead
-- to the same decision, writes and commits, all in one round trip (see
-- docs/market.md, "Settling one order"). This is the check.
--
-- For each balance row ($1 accounts, $2 assets, parallel arrays) the batch
-- ran a funds check on, the decision stays the same while the row's
-- available is at least $3 (NULL: no bound; every hold that passed still
-- passes) and below $4 (NULL: no bound; every hold refused is still
-- refused). The rows are locked by the caller, so nothing changes them
-- before the commit. A row out of its bounds raises SETTLESTALE (SQLSTATE
-- P0001): the caller rolls back to its savepoint and decides again on the
-- locked rows.
CREATE FUNCTION settlement_funds_unchanged(accounts TEXT[], assets TEXT[], at_least NUMERIC[], below NUMERIC[])
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    stale TEXT;
BEGIN
    SELECT g.asset || ' of ' || g.account_id INTO stale
    FROM unnest(accounts, assets, at_least, below) AS g(account_id, asset, at_least, below)
    JOIN balances b ON b.account_id = g.account_id AND b.asset = g.asset
    WHERE b.available < g.at_least OR b.available >= g.below
    LIMIT 1;
    IF stale IS NOT NULL THEN
        RAISE EXCEPTION 'SETTLESTALE: balance % moved past what the batch decided on', stale;
    END IF;
END
$$;
