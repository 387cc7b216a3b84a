-- Whether the available amount $1 covers the amount $2, compared as NUMERIC.
SELECT $1::numeric >= $2::numeric
