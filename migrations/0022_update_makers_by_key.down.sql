-- settle_update_makers.sql as it was before 0022 runs the UPDATE itself.
DROP FUNCTION settlement_update_makers(TEXT[], NUMERIC[], NUMERIC[], NUMERIC[], NUMERIC[], TEXT[], TEXT[]);
