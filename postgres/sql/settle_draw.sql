-- Draws $1 ledger transaction ids and $2 book sequences, each list
-- ascending: the writes name them before the rows exist. An id left unused
-- is a gap, as a rollback leaves one.
SELECT ARRAY(SELECT nextval(pg_get_serial_sequence('ledger_transactions', 'id')) FROM generate_series(1, $1::int)),
    ARRAY(SELECT nextval('orders_book_sequence') FROM generate_series(1, $2::int))
