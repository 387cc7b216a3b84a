-- Applies a settlement batch's fills and cancels to the resting orders it
-- matched: $1..$7 are parallel arrays (id, quantity filled, notional
-- filled, fees paid, hold given up (consumed by the fills, released, or
-- all of it for a canceled order), new status, cancel reason or NULL: the
-- batch canceled a maker whose fill it could not compute exactly). A
-- filled or canceled maker leaves the book: no sequence, finished now.
-- Each maker is read by its key, whatever the planner's statistics say of
-- orders (settlement_update_makers, migration 0029: it locks each maker
-- found by an ordered probe of its key, then updates the rows it locked
-- by their address).
SELECT settlement_update_makers($1::text[], $2::numeric[], $3::numeric[], $4::numeric[], $5::numeric[], $6::text[],
    $7::text[])
