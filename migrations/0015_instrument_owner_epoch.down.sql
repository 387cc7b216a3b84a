DROP FUNCTION settlement_makers_unchanged(TEXT[], NUMERIC[], NUMERIC[]);
DROP FUNCTION settlement_owner_fence(TEXT, BIGINT, TEXT);
DROP FUNCTION settlement_instrument_terms(instruments);
ALTER TABLE instruments DROP COLUMN owner_epoch;
