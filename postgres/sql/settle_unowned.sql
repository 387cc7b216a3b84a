-- The locked path's fence, queued right after settle_instruments.sql locked
-- the batch's instruments ($1, symbols): returns nothing; raises
-- SETTLEOWNED (SQLSTATE P0001) when one of them has a live owner
-- (settlement_unowned, migration 0018): only the owner writes its orders.
SELECT settlement_unowned($1::text[])
