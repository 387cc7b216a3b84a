-- Writes the canceled row of an order ($1..$8 the order, $9 when it was
-- placed, $10 when it was canceled: NULL is now). An order that has its row
-- already keeps it, and nothing is inserted.
INSERT INTO orders (id, account_id, client_order_id, symbol, side, type,
    quantity, price, status, created_at, finished_at)
VALUES ($1, $2, $3, $4, $5, $6, $7::numeric, $8::numeric, 'canceled', $9, COALESCE($10, now()))
ON CONFLICT (id) DO NOTHING
