-- Rows for the settlement plan tests, shaped as the bench's database after
-- a matching run (TestSettlementGenericPlansProbeKeys takes 1,000 customer
-- accounts, 20,000 orders and 9,999 trades): per account a balance in each
-- of the three assets and an event source per instrument, orders over the
-- three instruments (every 20th resting, the rest filled), trades with
-- their ledger transactions and two entries each, and relayed outbox rows.
-- Accounts are ACC_<26 digits of n>, orders ORD_<26 digits of n>; trade g
-- is between orders 2g and 2g + 1. The ranges are placeholders the tests
-- replace (planRows): accounts A0..A1, orders O0..O1, trades and their
-- ledger transactions T0..T1, outbox rows X0..X1, each inclusive.
INSERT INTO accounts (id, name, kind) SELECT 'ACC_' || lpad(g::text, 26, '0'), 'a' || g, 'customer' FROM generate_series(A0, A1) g;
INSERT INTO balances (account_id, asset, available, held, version)
SELECT 'ACC_' || lpad(g::text, 26, '0'), a, 1000000, 0, 1 FROM generate_series(A0, A1) g, unnest(ARRAY['USD','BTC','ETH']) a;
INSERT INTO event_sources (name, version) SELECT 'events:ACC_' || lpad(g::text, 26, '0') || ':' || s, 10
FROM generate_series(A0, A1) g, unnest(ARRAY['BTC-USD','ETH-USD','ETH-BTC']) s;
INSERT INTO orders (id, account_id, client_order_id, symbol, side, type, time_in_force, quantity, price, status,
    filled_quantity, filled_notional, sequence, created_at, finished_at)
SELECT 'ORD_' || lpad(g::text, 26, '0'), 'ACC_' || lpad((g % 1000 + 1)::text, 26, '0'), 'c' || g,
    (ARRAY['BTC-USD','ETH-USD','ETH-BTC'])[g % 3 + 1], CASE WHEN g % 2 = 0 THEN 'buy' ELSE 'sell' END, 'limit', 'gtc',
    1, 100, CASE WHEN g % 20 = 0 THEN 'open' ELSE 'filled' END, CASE WHEN g % 20 = 0 THEN 0 ELSE 1 END,
    CASE WHEN g % 20 = 0 THEN 0 ELSE 100 END, CASE WHEN g % 20 = 0 THEN g END, now(), now()
FROM generate_series(O0, O1) g;
SELECT setval('orders_book_sequence', 200000);
INSERT INTO ledger_transactions (id, kind, order_id) OVERRIDING SYSTEM VALUE
SELECT g, 'trade', 'ORD_' || lpad((2 * g + 1)::text, 26, '0') FROM generate_series(T0, T1) g;
SELECT setval(pg_get_serial_sequence('ledger_transactions', 'id'), T1);
INSERT INTO ledger_entries (transaction_id, account_id, asset, amount, part)
SELECT g, 'ACC_' || lpad(((2 * g + s) % 1000 + 1)::text, 26, '0'), 'USD', CASE WHEN s = 0 THEN 1 ELSE -1 END, 'available'
FROM generate_series(T0, T1) g, generate_series(0, 1) s;
INSERT INTO trades (symbol, maker_order_id, taker_order_id, maker_account_id, taker_account_id, taker_side, price, quantity,
    maker_fee, taker_fee, maker_fee_bps, taker_fee_bps, ledger_transaction_id)
SELECT (ARRAY['BTC-USD','ETH-USD','ETH-BTC'])[(2 * g) % 3 + 1], 'ORD_' || lpad((2 * g)::text, 26, '0'),
    'ORD_' || lpad((2 * g + 1)::text, 26, '0'), 'ACC_' || lpad(((2 * g) % 1000 + 1)::text, 26, '0'),
    'ACC_' || lpad(((2 * g + 1) % 1000 + 1)::text, 26, '0'), 'buy', 100, 1, 0.1, 0.2, 10, 20, g
FROM generate_series(T0, T1) g;
INSERT INTO outbox (name, version, payload, relayed_at) SELECT 'x' || g, 1, 'p', now() FROM generate_series(X0, X1) g;
