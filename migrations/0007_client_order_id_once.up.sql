-- An account's client order id names one order, for good: the queue's
-- dedup window (24 h by default) turns a client's retry into a replay of
-- its first answer, but Redis can lose that window (a failover to a replica
-- that missed it, a restart without persistence), and the retry is then
-- admitted under a new order id. This unique index is the guard that
-- outlives the window: settlement finds the pair taken and rejects the
-- second order (reject_reason duplicate_client_order_id, duplicate_of the
-- first), and a row that would claim the pair twice fails.
--
-- duplicate_of names the order that holds the pair; rows that hold it have
-- NULL. Rows written before this migration that share a pair (a retry
-- settled twice, which the audit's client_order_id_settled_once check then
-- reports) keep their data: every one after the first, by time and id, is
-- marked a duplicate of the first.
ALTER TABLE orders ADD COLUMN duplicate_of TEXT REFERENCES orders (id);

UPDATE orders o
SET duplicate_of = f.first_id
FROM (SELECT id, first_value(id) OVER (PARTITION BY account_id, client_order_id ORDER BY created_at, id) AS first_id
      FROM orders) AS f
WHERE f.id = o.id AND f.first_id <> o.id;

CREATE UNIQUE INDEX orders_client_order_id ON orders (account_id, client_order_id) WHERE duplicate_of IS NULL;
