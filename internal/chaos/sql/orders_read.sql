-- Every row of orders (one per order a worker took, resting ones included),
-- with the client order it was placed as.
SELECT id, account_id, client_order_id, status FROM orders
