-- Inserts a settlement batch's trades: $1..$13 are parallel arrays
-- (symbol, maker order, taker order, maker account, taker account, taker
-- side, price, quantity, maker fee, taker fee, ledger transaction id, maker
-- fee rate and taker fee rate in basis points, the fees were computed at).
INSERT INTO trades (symbol, maker_order_id, taker_order_id, maker_account_id, taker_account_id, taker_side,
    price, quantity, maker_fee, taker_fee, ledger_transaction_id, maker_fee_bps, taker_fee_bps)
SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::numeric[],
    $8::numeric[], $9::numeric[], $10::numeric[], $11::bigint[], $12::numeric[], $13::numeric[])
