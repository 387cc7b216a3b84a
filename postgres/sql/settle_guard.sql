-- Checks, after settle_lock.sql locked them, that the balance rows a
-- settlement batch ran funds checks on still lead to the same decision:
-- $1 accounts, $2 assets, $3 the least available each may hold (NULL: no
-- bound), $4 the available each must stay below (NULL: no bound), parallel
-- arrays. Returns nothing; raises SETTLESTALE (SQLSTATE P0001) when a row
-- is out of its bounds (migration 0006, settlement_funds_unchanged).
SELECT settlement_funds_unchanged($1::text[], $2::text[], $3::numeric[], $4::numeric[])
