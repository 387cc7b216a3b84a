-- Inserts the rows of the orders a settlement batch took, each as the batch
-- left it: $1..$22 are parallel arrays (id, account, client order id,
-- symbol, side, type, time in force, post-only, quantity, limit price or
-- NULL, status, reject reason or NULL, cancel reason or NULL, filled
-- quantity, filled notional, fees, hold, whether it rests, the settling
-- lease's fencing token, when it was placed, the order holding its client
-- order id or NULL, a market order's protection price or NULL), in the
-- order the batch decided them. A resting order draws its book sequence here, in that
-- order, so orders of one batch keep their time priority. No ON CONFLICT:
-- the batch left out the orders that had a row under its locks, so a row
-- found now was written by a cancel on the queue, and the failure makes
-- the orders settle again one by one, which find it.
INSERT INTO orders (id, account_id, client_order_id, symbol, side, type, time_in_force, post_only, quantity, price,
    status, reject_reason, cancel_reason, filled_quantity, filled_notional, fees, hold, sequence, settled_by_token,
    created_at, updated_at, finished_at, duplicate_of, protection_price)
SELECT o.id, o.account_id, o.client_order_id, o.symbol, o.side, o.type, o.time_in_force, o.post_only, o.quantity,
    o.price, o.status, o.reject_reason, o.cancel_reason, o.filled_quantity, o.filled_notional, o.fees, o.hold,
    CASE WHEN o.rests THEN nextval('orders_book_sequence') END, o.settled_by_token, o.created_at, now(), now(),
    o.duplicate_of, o.protection_price
FROM (SELECT *
      FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::boolean[],
              $9::numeric[], $10::numeric[], $11::text[], $12::text[], $13::text[], $14::numeric[], $15::numeric[],
              $16::numeric[], $17::numeric[], $18::boolean[], $19::bigint[], $20::timestamptz[], $21::text[],
              $22::numeric[])
          WITH ORDINALITY
          AS o(id, account_id, client_order_id, symbol, side, type, time_in_force, post_only, quantity, price, status,
               reject_reason, cancel_reason, filled_quantity, filled_notional, fees, hold, rests, settled_by_token,
               created_at, duplicate_of, protection_price, position)
      ORDER BY position) AS o
