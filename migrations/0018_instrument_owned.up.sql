-- Whether an instrument has a live owner (issue 24): true from an owner's
-- take-over (postgres.Settler.TakeOver, which raises owner_epoch) until
-- that owner gives the instrument up (GiveUp, which clears it only while
-- owner_epoch is still its own). A settler that is no owner (the locked
-- path, which locks the instrument per batch) refuses to write on an owned
-- instrument (settlement_unowned), so an owned instrument's orders settle
-- only through its owner, whose fence is owner_epoch. An owner that dies
-- leaves it true; the next owner takes over above its epoch.
ALTER TABLE instruments ADD COLUMN owned BOOLEAN NOT NULL DEFAULT false;

-- The locked path's fence, right after it locked its instruments
-- (settle_instruments.sql): raises SETTLEOWNED (SQLSTATE P0001) when one of
-- p_symbols has a live owner, naming its epoch. Under the instrument row's
-- lock, so an owner's take-over (an UPDATE of the row) waits for the
-- locked batch to end, and a locked batch after it sees owned.
CREATE FUNCTION settlement_unowned(p_symbols TEXT[])
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    owned_symbol TEXT;
    epoch BIGINT;
BEGIN
    SELECT i.symbol, i.owner_epoch INTO owned_symbol, epoch
    FROM instruments i WHERE i.symbol = ANY(p_symbols) AND i.owned
    ORDER BY i.symbol LIMIT 1;
    IF owned_symbol IS NOT NULL THEN
        RAISE EXCEPTION 'SETTLEOWNED: instrument % has an owner at epoch %', owned_symbol, epoch;
    END IF;
END
$$;
