-- What became of a phase's orders ($1, their ids): how many have a row (a
-- worker took them: filled, resting, canceled or rejected), how many of
-- those are filled, resting (open or partially filled), canceled and
-- rejected, and how many trades they took part in as the taker.
SELECT count(*),
    count(*) FILTER (WHERE status = 'filled'),
    count(*) FILTER (WHERE status IN ('open', 'partially_filled')),
    count(*) FILTER (WHERE status = 'canceled'),
    count(*) FILTER (WHERE status = 'rejected'),
    (SELECT count(*) FROM trades WHERE taker_order_id = ANY($1))
FROM orders WHERE id = ANY($1)
