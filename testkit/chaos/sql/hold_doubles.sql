-- Every order with more than one hold transaction: a redelivery that held
-- its funds again, as (order id, status, hold transactions). Since
-- migration 0014 a hold is no ledger transaction (it moves the balance
-- row's available to held and the order's row keeps it): a hold taken
-- twice then shows in the audit's held_matches_orders, which the run
-- checks too; this query covers the ledger written before.
SELECT o.id, o.status, count(t.id)
FROM orders o JOIN ledger_transactions t ON t.order_id = o.id AND t.kind = 'hold'
GROUP BY o.id, o.status
HAVING count(t.id) > 1
ORDER BY o.id
