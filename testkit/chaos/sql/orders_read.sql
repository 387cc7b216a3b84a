-- Every row of orders (one per order a worker took, resting ones included),
-- with the client order it was placed as and, for a rejection, its reason
-- and the order that holds its client order id (empty strings otherwise),
-- as (id, account id, client order id, status, reject reason, duplicate of).
SELECT id, account_id, client_order_id, status, coalesce(reject_reason, ''), coalesce(duplicate_of, '')
FROM orders
