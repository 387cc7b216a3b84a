-- One statement locks all four rows an order moves (its account's $1 and the
-- venue's $2, in the base and the quote of the instrument $3) in (account,
-- asset) order: every settlement takes them in the same order, so none waits
-- on another in a cycle. It reads what each holds under the lock, for the
-- funds rule (rejection in settle.go) to compare exactly. A reference price
-- changed since settle_price.sql read it could at worst make a balance's
-- CHECK refuse the writes, and the retry prices afresh.
SELECT b.account_id, b.asset, b.version, b.available::text
FROM balances b JOIN instruments i ON b.asset IN (i.base, i.quote)
WHERE i.symbol = $3 AND b.account_id IN ($1, $2)
ORDER BY b.account_id, b.asset
FOR UPDATE OF b
