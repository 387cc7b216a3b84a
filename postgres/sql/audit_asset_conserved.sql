-- Audit check asset_conserved (CheckConservation): every asset whose
-- balances (available and held) do not sum to zero, as (subject, detail).
SELECT asset, format('balances sum to %s, not 0', trim_scale(sum(available + held)))
FROM balances GROUP BY asset HAVING sum(available + held) <> 0
ORDER BY asset
