-- Every instrument and the epoch of its latest owner (0: never owned), as
-- (symbol, owner_epoch): the checker takes each over above it.
SELECT symbol, owner_epoch FROM instruments ORDER BY symbol
