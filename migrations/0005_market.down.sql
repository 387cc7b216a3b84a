-- Reverts the market's schema. It cannot undo trades, holds or resting
-- orders (the ledger is append-only), so it refuses a database that has any.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM ledger_transactions WHERE kind IN ('hold', 'release', 'trade'))
       OR EXISTS (SELECT 1 FROM orders WHERE status NOT IN ('filled', 'rejected', 'canceled')) THEN
        RAISE EXCEPTION 'the market has traded here; its schema cannot be reverted';
    END IF;
END $$;

DROP TABLE trades;
DROP TRIGGER instruments_fees_change_on_an_empty_book ON instruments;
DROP FUNCTION instruments_fees_change_on_an_empty_book();
DROP INDEX orders_account_resting;
DROP INDEX orders_book;
DROP SEQUENCE orders_book_sequence;

ALTER TABLE orders
    DROP CONSTRAINT orders_market_is_ioc,
    DROP CONSTRAINT orders_post_only_rests,
    DROP CONSTRAINT orders_settled_has_fill,
    DROP CONSTRAINT orders_only_resting_holds,
    DROP CONSTRAINT orders_resting_has_sequence,
    DROP CONSTRAINT orders_filled_within_quantity,
    DROP CONSTRAINT orders_status_check,
    DROP COLUMN updated_at,
    DROP COLUMN sequence,
    DROP COLUMN cancel_reason,
    DROP COLUMN hold,
    DROP COLUMN fees,
    DROP COLUMN filled_notional,
    DROP COLUMN filled_quantity,
    DROP COLUMN post_only,
    DROP COLUMN time_in_force;
UPDATE orders SET status = 'settled' WHERE status = 'filled';
ALTER TABLE orders
    ADD CONSTRAINT orders_status_check CHECK (status IN ('settled', 'rejected', 'canceled')),
    ADD CONSTRAINT orders_check2 CHECK ((status = 'settled') = (fill_price IS NOT NULL AND fill_quantity IS NOT NULL
                                   AND fill_notional IS NOT NULL AND ledger_transaction_id IS NOT NULL));

DROP INDEX ledger_transactions_one_settlement;
DROP INDEX ledger_transactions_order;
ALTER TABLE ledger_transactions DROP CONSTRAINT ledger_transactions_order_check;
ALTER TABLE ledger_transactions DROP CONSTRAINT ledger_transactions_kind_check;
ALTER TABLE ledger_transactions
    ADD CONSTRAINT ledger_transactions_kind_check CHECK (kind IN ('deposit', 'withdrawal', 'settlement')),
    ADD CONSTRAINT ledger_transactions_check CHECK ((kind = 'settlement') = (order_id IS NOT NULL)),
    ADD CONSTRAINT ledger_transactions_order_id_key UNIQUE (order_id);

ALTER TABLE ledger_entries DROP COLUMN part;
ALTER TABLE balances DROP COLUMN held;

UPDATE accounts SET name = 'venue liquidity' WHERE id = 'ACC_0000000000000000000000000V';

ALTER TABLE instruments
    DROP CONSTRAINT instruments_amounts_fit_the_ledger,
    DROP CONSTRAINT instruments_fee_within_notional,
    DROP CONSTRAINT instruments_maker_fee_within_taker,
    DROP COLUMN last_price,
    DROP COLUMN price_band_percent,
    DROP COLUMN taker_fee_bps,
    DROP COLUMN maker_fee_bps;
