-- One owner per instrument, fenced in PostgreSQL too (issue 24): the worker
-- that owns an instrument's queue matches its book in memory and writes each
-- batch in one transaction that first checks, under the instrument row's
-- lock, that the row still holds its epoch. A new owner raises the epoch
-- above the old one's when it takes over (postgres.Settler.TakeOver), so a
-- stale owner's write is refused even after a Redis failover lost the lease.
-- 0: never owned (settlers that lock the instrument per batch ignore it).
ALTER TABLE instruments ADD COLUMN owner_epoch BIGINT NOT NULL DEFAULT 0 CHECK (owner_epoch >= 0);

-- The terms of an instrument an owner decides on besides its book: status,
-- tick, lot, minimum notional, reference, fees, band. Not the last price,
-- which only the owner's own writes move. The owner keeps the text it loaded
-- and the fence compares it, so a halt or a new reference behind the
-- owner's back makes it load the instrument again rather than decide on
-- the old terms.
CREATE FUNCTION settlement_instrument_terms(i instruments)
RETURNS TEXT
LANGUAGE sql
STABLE
AS $$
    SELECT concat_ws('|', i.status, trim_scale(i.tick_size), trim_scale(i.lot_size), trim_scale(i.min_notional),
        trim_scale(i.reference_price), trim_scale(i.maker_fee_bps), trim_scale(i.taker_fee_bps),
        trim_scale(i.price_band_percent))
$$;

-- The owner's fence, first statement of each of its batch transactions:
-- locks the instrument row p_symbol (which serializes the batch with every
-- cancel of a resting order and every settler that locks the instrument)
-- and raises SETTLEFENCED (SQLSTATE P0001) unless its owner_epoch is
-- p_epoch, SETTLESTALE when its terms are no longer p_terms.
CREATE FUNCTION settlement_owner_fence(p_symbol TEXT, p_epoch BIGINT, p_terms TEXT)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    epoch BIGINT;
    terms TEXT;
BEGIN
    SELECT i.owner_epoch, settlement_instrument_terms(i) INTO epoch, terms
    FROM instruments i WHERE i.symbol = p_symbol
    FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'SETTLEFENCED: instrument % has no row', p_symbol;
    END IF;
    IF epoch <> p_epoch THEN
        RAISE EXCEPTION 'SETTLEFENCED: instrument % is owned at epoch %, not %', p_symbol, epoch, p_epoch;
    END IF;
    IF terms IS DISTINCT FROM p_terms THEN
        RAISE EXCEPTION 'SETTLESTALE: instrument % changed its terms', p_symbol;
    END IF;
END
$$;

-- The owner's check of the resting orders its batch fills or cancels:
-- each (ids, remaining quantity, hold, parallel arrays) must still rest
-- with what the owner's book says, or a cancel (postgres/cancel.go) changed
-- it behind the owner's back, and SETTLESTALE (SQLSTATE P0001) is raised.
-- Runs under the fence's instrument lock, which every writer of a resting
-- order takes first, so the rows cannot change before the commit.
CREATE FUNCTION settlement_makers_unchanged(ids TEXT[], remaining NUMERIC[], holds NUMERIC[])
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
