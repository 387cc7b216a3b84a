-- The instruments a live owner holds now (owned: taken over and not given
-- up since, migration 0018), as (symbol): each such owner logs the book it
-- gives up when the checker stops the workers.
SELECT symbol FROM instruments WHERE owned ORDER BY symbol
