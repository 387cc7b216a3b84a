-- The writes' rows list "<name>@<version>" again, through 0023's function.
DROP FUNCTION settlement_move_balances(TEXT[], TEXT[], TEXT[], NUMERIC[], NUMERIC[], BIGINT[], TEXT, BOOLEAN);
