-- The orders of a settlement batch whose account's client order id another
-- order holds already ($1 ids, $2 accounts, $3 client order ids, parallel
-- arrays): returns each such order's account and client order id, and the
-- holder's id. Read under the instrument locks; a holder of another
-- instrument that commits meanwhile makes the batch's insert fail on
-- orders_client_order_id, and its orders then settle one by one, which find
-- it.
--
-- One index probe per batch order (the LATERAL with LIMIT is not flattened):
-- a plain join's generic plan, cached on a connection while orders was
-- small, scanned every order once per batch order (55 ms a batch at 10,000).
SELECT b.account_id, b.client_order_id, h.id
FROM unnest($1::text[], $2::text[], $3::text[]) AS b(id, account_id, client_order_id)
CROSS JOIN LATERAL (SELECT o.id FROM orders o
                    WHERE o.account_id = b.account_id AND o.client_order_id = b.client_order_id
                      AND o.duplicate_of IS NULL AND o.id <> b.id
                    LIMIT 1) h
