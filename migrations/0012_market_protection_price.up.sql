-- A market order's protection price: the edge of the price band on its
-- side around the reference it settled at, past which it never trades (a
-- buy pays no more, a sell takes no less). Settlement writes it on every
-- market order it decides past the band (docs/market.md), so the audit's
-- market_within_protection can hold each market order's trades to it.
-- Market orders settled before this migration have none, and that check
-- passes over them.
ALTER TABLE orders
    ADD COLUMN protection_price NUMERIC(38, 18) CHECK (protection_price > 0),
    ADD CONSTRAINT orders_protection_price_of_market CHECK (type = 'market' OR protection_price IS NULL);
