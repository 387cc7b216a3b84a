-- Writes the final row of an order settlement rejects: $1..$8 the order, $9
-- the reason, $10 the settling lease's token, $11 when it was placed. An
-- order that has its row already keeps it, and nothing is inserted.
INSERT INTO orders (id, account_id, client_order_id, symbol, side, type, quantity, price,
    status, reject_reason, settled_by_token, created_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'rejected', $9, $10, $11)
ON CONFLICT (id) DO NOTHING
