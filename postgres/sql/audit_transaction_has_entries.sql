-- Audit check transaction_has_entries (CheckTransactionEntries): every
-- ledger transaction with fewer than two entries, as (subject, detail).
SELECT 'txn/' || t.id, format('%s transaction with %s entries', t.kind, count(e.id))
FROM ledger_transactions t LEFT JOIN ledger_entries e ON e.transaction_id = t.id
GROUP BY t.id, t.kind HAVING count(e.id) < 2
ORDER BY t.id
