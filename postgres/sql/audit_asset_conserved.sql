-- Audit check asset_conserved (CheckConservation): every asset whose
-- balances, available and held parts together, do not sum to zero, as
-- (subject, detail). A hold moves value between the parts of one balance, so
-- only the two together are conserved.
SELECT asset, format('balances sum to %s (available %s, held %s), not 0', trim_scale(sum(available + held)),
    trim_scale(sum(available)), trim_scale(sum(held)))
FROM balances GROUP BY asset HAVING sum(available + held) <> 0
ORDER BY asset
