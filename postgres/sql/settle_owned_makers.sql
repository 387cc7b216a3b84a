-- Checks, under the owner's fence, that the resting orders an owner's
-- batch fills or cancels are as its book in memory has them: $1 ids, $2
-- remaining quantities, $3 holds, parallel arrays. Returns nothing; raises
-- SETTLESTALE (SQLSTATE P0001) when one is not (a cancel behind the owner's
-- back), and the owner loads its book again (settlement_makers_unchanged,
-- migration 0015).
SELECT settlement_makers_unchanged($1::text[], $2::numeric[], $3::numeric[])
