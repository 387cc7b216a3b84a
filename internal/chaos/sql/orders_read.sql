-- Every final row of orders, with the client order it was placed as.
SELECT id, account_id, client_order_id, status FROM orders
