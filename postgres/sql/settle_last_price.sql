-- Sets each instrument's last trade price: $1 symbols, $2 prices.
UPDATE instruments i SET last_price = p.price
FROM unnest($1::text[], $2::numeric[]) AS p(symbol, price)
WHERE i.symbol = p.symbol
