-- The owner's view of instrument $1 besides settle_instruments.sql's:
-- returns its owner_epoch (bigint) and its terms
-- (settlement_instrument_terms, migration 0015), which the owner's fence
-- compares on every batch; no row for an unknown instrument.
SELECT i.owner_epoch, settlement_instrument_terms(i) FROM instruments i WHERE i.symbol = $1
