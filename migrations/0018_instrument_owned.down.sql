DROP FUNCTION settlement_unowned(TEXT[]);
ALTER TABLE instruments DROP COLUMN owned;
