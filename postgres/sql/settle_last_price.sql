-- Sets each instrument's last trade price: $1 symbols, $2 prices. A price
-- that did not move leaves the row alone: a write of the instrument row
-- makes a new version of it, and every probe of the row (the owner's
-- fence, the terms, the orders' and trades' reference checks) walks the
-- versions a snapshot older than them still needs.
UPDATE instruments i SET last_price = p.price
FROM unnest($1::text[], $2::numeric[]) AS p(symbol, price)
WHERE i.symbol = p.symbol AND i.last_price IS DISTINCT FROM p.price
