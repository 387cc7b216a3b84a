-- Audit check trade_between_accounts (CheckTradeAccounts): every trade
-- between two orders of one account, or whose account columns are not its
-- orders' accounts, as (subject, detail). Self-trade prevention cancels the
-- taker instead.
SELECT 'trade/' || t.id, CASE
    WHEN t.maker_account_id <> mk.account_id OR t.taker_account_id <> tk.account_id
        THEN format('names maker account %s and taker account %s, its orders belong to %s and %s',
            t.maker_account_id, t.taker_account_id, mk.account_id, tk.account_id)
    ELSE format('maker %s and taker %s are both of account %s', t.maker_order_id, t.taker_order_id, mk.account_id)
END
FROM trades t
JOIN orders mk ON mk.id = t.maker_order_id
JOIN orders tk ON tk.id = t.taker_order_id
WHERE t.maker_account_id <> mk.account_id OR t.taker_account_id <> tk.account_id
   OR mk.account_id = tk.account_id OR t.maker_account_id = t.taker_account_id
ORDER BY t.id
