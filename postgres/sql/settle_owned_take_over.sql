-- Makes the caller the owner of instrument $1 at epoch $2 (bigint), above
-- every owner before: returns the symbol when the row's owner_epoch was
-- below $2 and is now $2 (and owned is true: the locked path refuses to
-- write on it, migration 0018), nothing when the instrument is unknown or
-- an owner at $2 or above holds it (the caller reads owner_epoch to say
-- which). Its lock on the row lasts the caller's transaction, which loads
-- the book.
UPDATE instruments SET owner_epoch = $2::bigint, owned = true
WHERE symbol = $1 AND owner_epoch < $2::bigint
RETURNING symbol
