-- An owner gives instrument $1 up at its epoch $2 (bigint): the instrument
-- has no live owner any more and the locked path may settle it again
-- (migration 0018). Changes nothing when another owner took the instrument
-- over since (owner_epoch is no longer $2), so a stale owner never frees
-- an instrument a newer one holds. Returns nothing.
UPDATE instruments SET owned = false
WHERE symbol = $1 AND owner_epoch = $2::bigint AND owned
