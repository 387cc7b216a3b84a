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
-- NULL. Rows written before this migration may share a pair: a retry
-- settled twice, or a client order id reused after the window, which was
-- allowed then. They keep their data. Of each such pair the first order
-- that moved money holds it (or the first, when none did), by time and id;
-- the others are marked its duplicates, and marked as marked here
-- (duplicate_marked_by_migration): the audit's client_order_id_settled_once
-- reports only duplicates that moved money since.
ALTER TABLE orders
    ADD COLUMN duplicate_of TEXT REFERENCES orders (id),
    ADD COLUMN duplicate_marked_by_migration BOOLEAN NOT NULL DEFAULT false;

UPDATE orders o
SET duplicate_of = f.holder, duplicate_marked_by_migration = true
FROM (SELECT id, first_value(id) OVER (PARTITION BY account_id, client_order_id
                                       ORDER BY moved DESC, created_at, id) AS holder
      FROM (SELECT o.id, o.account_id, o.client_order_id, o.created_at,
                   o.ledger_transaction_id IS NOT NULL
                   OR EXISTS (SELECT 1 FROM ledger_transactions t WHERE t.order_id = o.id)
                   OR EXISTS (SELECT 1 FROM trades t WHERE t.maker_order_id = o.id) AS moved
            FROM orders o
            WHERE (o.account_id, o.client_order_id) IN (SELECT account_id, client_order_id FROM orders
                                                        GROUP BY account_id, client_order_id
                                                        HAVING count(*) > 1)) AS shared) AS f
WHERE f.id = o.id AND f.holder <> o.id;

CREATE UNIQUE INDEX orders_client_order_id ON orders (account_id, client_order_id) WHERE duplicate_of IS NULL;
