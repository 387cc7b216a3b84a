-- An owner's fence, the first statement of each of its batch transactions:
-- $1 symbol, $2 the owner's epoch (bigint), $3 the instrument's terms as
-- the owner loaded them. Locks the instrument row; returns nothing; raises
-- SETTLEFENCED (SQLSTATE P0001) when another owner took the instrument
-- over, SETTLESTALE when its terms changed (settlement_owner_fence,
-- migration 0015).
SELECT settlement_owner_fence($1::text, $2::bigint, $3::text)
