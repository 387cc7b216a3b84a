-- How much an audit looks at: the balances, the ledger transactions and the
-- orders' final rows.
SELECT (SELECT count(*) FROM balances), (SELECT count(*) FROM ledger_transactions),
    (SELECT count(*) FROM orders)
