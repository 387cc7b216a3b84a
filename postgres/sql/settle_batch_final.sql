-- The orders of a settlement batch ($1, their ids) that have a final row
-- already. Read under the balance locks: a settler of any of these orders
-- that committed before them is seen, and one that did not waits for this
-- commit.
SELECT id FROM orders WHERE id = ANY($1)
