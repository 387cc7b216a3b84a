-- Every order with more than one settlement transaction, and how many.
SELECT order_id, count(*) FROM ledger_transactions WHERE kind = 'settlement' GROUP BY order_id HAVING count(*) > 1
