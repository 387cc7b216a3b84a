-- Audit check asset_conserved (CheckConservation): every asset whose
-- balances do not sum to zero, as (subject, detail).
SELECT asset, format('balances sum to %s, not 0', trim_scale(sum(available)))
FROM balances GROUP BY asset HAVING sum(available) <> 0
ORDER BY asset
