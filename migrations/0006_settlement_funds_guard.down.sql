DROP FUNCTION settlement_funds_unchanged(TEXT[], TEXT[], NUMERIC[], NUMERIC[]);
