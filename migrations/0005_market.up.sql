-- The market: orders match in a central limit order book per instrument
-- instead of filling against the venue at the sender's own price.
-- docs/market.md explains the model; this file is its schema.

-- Instruments: fees in basis points (exact; fractions of a basis point
-- allowed, 0 allowed), the price band around the reference price a limit
-- price must fall in, and the last trade price, which becomes the reference
-- from the first trade on.
ALTER TABLE instruments
    ADD COLUMN maker_fee_bps      NUMERIC(10, 4) NOT NULL DEFAULT 10 CHECK (maker_fee_bps >= 0),
    ADD COLUMN taker_fee_bps      NUMERIC(10, 4) NOT NULL DEFAULT 20 CHECK (taker_fee_bps >= 0),
    ADD COLUMN price_band_percent NUMERIC(6, 2) NOT NULL DEFAULT 10 CHECK (price_band_percent > 0 AND price_band_percent < 100),
    ADD COLUMN last_price         NUMERIC(38, 18) CHECK (last_price > 0),
    -- a maker never pays more than a taker, so a resting buy's hold at the
    -- taker rate covers whichever fee it ends up paying
    ADD CONSTRAINT instruments_maker_fee_within_taker CHECK (maker_fee_bps <= taker_fee_bps),
    -- a fee never exceeds the notional it is paid on
    ADD CONSTRAINT instruments_fee_within_notional CHECK (taker_fee_bps <= 10000),
    -- a hold (quantity × price × (1 + bps/10000)) and a fee fit the ledger's
    -- 18 decimals exactly: money is never rounded
    ADD CONSTRAINT instruments_amounts_fit_the_ledger CHECK (
        scale(trim_scale(tick_size)) + scale(trim_scale(lot_size))
        + greatest(scale(trim_scale(maker_fee_bps)), scale(trim_scale(taker_fee_bps))) + 4 <= 18);

-- A resting buy held its fee at the taker rate of the moment it rested: a
-- rate raised under it would leave it unable to pay its fill. Fees change
-- only while the instrument's book is empty (halt, cancel, change, resume).
CREATE FUNCTION instruments_fees_change_on_an_empty_book() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF (NEW.maker_fee_bps, NEW.taker_fee_bps) IS DISTINCT FROM (OLD.maker_fee_bps, OLD.taker_fee_bps)
       AND EXISTS (SELECT 1 FROM orders WHERE symbol = NEW.symbol AND status IN ('open', 'partially_filled')) THEN
        RAISE EXCEPTION 'the fees of % change only while its book is empty', NEW.symbol
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$;

-- The venue account no longer provides liquidity: it collects the fees.
UPDATE accounts SET name = 'venue fees' WHERE id = 'ACC_0000000000000000000000000V';

-- Every balance has two parts: available, and held by the account's resting
-- orders. A hold is a ledger transaction moving an amount from one part to
-- the other; both parts are versioned together by the row's version.
ALTER TABLE balances
    ADD COLUMN held NUMERIC(38, 18) NOT NULL DEFAULT 0 CHECK (held >= 0);

-- A ledger entry names the part of the balance it moves.
ALTER TABLE ledger_entries
    ADD COLUMN part TEXT NOT NULL DEFAULT 'available' CHECK (part IN ('available', 'held'));

-- Transactions: a hold or release of one order's funds, a trade between two
-- orders. order_id is the order a hold or release is for, or the taker of a
-- trade; one order now has many transactions.
ALTER TABLE ledger_transactions DROP CONSTRAINT ledger_transactions_order_id_key;
ALTER TABLE ledger_transactions DROP CONSTRAINT ledger_transactions_kind_check;
ALTER TABLE ledger_transactions DROP CONSTRAINT ledger_transactions_check;
ALTER TABLE ledger_transactions ADD CONSTRAINT ledger_transactions_kind_check
    CHECK (kind IN ('deposit', 'withdrawal', 'settlement', 'hold', 'release', 'trade'));
ALTER TABLE ledger_transactions ADD CONSTRAINT ledger_transactions_order_check
    CHECK ((kind IN ('deposit', 'withdrawal')) = (order_id IS NULL));
CREATE INDEX ledger_transactions_order ON ledger_transactions (order_id) WHERE order_id IS NOT NULL;
-- The one settlement transaction of an order settled before the market.
CREATE UNIQUE INDEX ledger_transactions_one_settlement ON ledger_transactions (order_id) WHERE kind = 'settlement';

-- Orders: the table holds every order a worker has taken, resting ones
-- included; a resting order's row changes as it fills.
ALTER TABLE orders DROP CONSTRAINT orders_status_check;
ALTER TABLE orders DROP CONSTRAINT orders_check2;
ALTER TABLE orders
    ADD COLUMN time_in_force   TEXT NOT NULL DEFAULT 'gtc' CHECK (time_in_force IN ('gtc', 'ioc', 'fok')),
    ADD COLUMN post_only       BOOLEAN NOT NULL DEFAULT false,
    ADD COLUMN filled_quantity NUMERIC(38, 18) NOT NULL DEFAULT 0 CHECK (filled_quantity >= 0),
    -- quantity × price summed over the order's trades, in the quote asset
    ADD COLUMN filled_notional NUMERIC(38, 18) NOT NULL DEFAULT 0 CHECK (filled_notional >= 0),
    -- fees the order paid, in the quote asset
    ADD COLUMN fees            NUMERIC(38, 18) NOT NULL DEFAULT 0 CHECK (fees >= 0),
    -- what the order still holds: quote for a buy, base for a sell
    ADD COLUMN hold            NUMERIC(38, 18) NOT NULL DEFAULT 0 CHECK (hold >= 0),
    ADD COLUMN cancel_reason   TEXT,
    -- time priority in the book: set when the order comes to rest
    ADD COLUMN sequence        BIGINT UNIQUE,
    ADD COLUMN updated_at      TIMESTAMPTZ NOT NULL DEFAULT now();

-- Settled orders keep their row and read as what they were: filled whole at
-- their one fill price, without fees.
UPDATE orders SET status = 'filled', filled_quantity = fill_quantity, filled_notional = fill_notional
WHERE status = 'settled';
UPDATE orders SET time_in_force = 'ioc' WHERE type = 'market';

ALTER TABLE orders
    ADD CONSTRAINT orders_status_check
        CHECK (status IN ('open', 'partially_filled', 'filled', 'canceled', 'rejected')),
    ADD CONSTRAINT orders_filled_within_quantity CHECK (filled_quantity <= quantity),
    ADD CONSTRAINT orders_resting_has_sequence
        CHECK ((status IN ('open', 'partially_filled')) = (sequence IS NOT NULL)),
    ADD CONSTRAINT orders_only_resting_holds CHECK (status IN ('open', 'partially_filled') OR hold = 0),
    -- an order settled before the market keeps its one fill
    ADD CONSTRAINT orders_settled_has_fill
        CHECK ((ledger_transaction_id IS NOT NULL) = (fill_price IS NOT NULL AND fill_quantity IS NOT NULL
                                                     AND fill_notional IS NOT NULL)),
    ADD CONSTRAINT orders_post_only_rests CHECK (NOT post_only OR (type = 'limit' AND time_in_force = 'gtc')),
    ADD CONSTRAINT orders_market_is_ioc CHECK (type = 'limit' OR time_in_force = 'ioc');

CREATE TRIGGER instruments_fees_change_on_an_empty_book BEFORE UPDATE OF maker_fee_bps, taker_fee_bps ON instruments
    FOR EACH ROW EXECUTE FUNCTION instruments_fees_change_on_an_empty_book();

CREATE SEQUENCE orders_book_sequence;

-- The book: resting orders of one instrument and side by price, then time.
CREATE INDEX orders_book ON orders (symbol, side, price, sequence) WHERE status IN ('open', 'partially_filled');
CREATE INDEX orders_account_resting ON orders (account_id, symbol) WHERE status IN ('open', 'partially_filled');

-- One row per match: the maker rested, the taker arrived.
CREATE TABLE trades (
    id                    BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    symbol                TEXT NOT NULL REFERENCES instruments (symbol),
    maker_order_id        TEXT NOT NULL REFERENCES orders (id),
    taker_order_id        TEXT NOT NULL REFERENCES orders (id) DEFERRABLE INITIALLY DEFERRED,
    maker_account_id      TEXT NOT NULL REFERENCES accounts (id),
    taker_account_id      TEXT NOT NULL REFERENCES accounts (id),
    -- the side of the taker: a buy taker lifts an ask
    taker_side            TEXT NOT NULL CHECK (taker_side IN ('buy', 'sell')),
    price                 NUMERIC(38, 18) NOT NULL CHECK (price > 0),
    quantity              NUMERIC(38, 18) NOT NULL CHECK (quantity > 0),
    maker_fee             NUMERIC(38, 18) NOT NULL CHECK (maker_fee >= 0),
    taker_fee             NUMERIC(38, 18) NOT NULL CHECK (taker_fee >= 0),
    -- the rates the fees were computed at, so the audit checks each trade
    -- against its own rates however the instrument's change later
    maker_fee_bps         NUMERIC(10, 4) NOT NULL CHECK (maker_fee_bps >= 0),
    taker_fee_bps         NUMERIC(10, 4) NOT NULL CHECK (taker_fee_bps >= 0),
    ledger_transaction_id BIGINT NOT NULL UNIQUE REFERENCES ledger_transactions (id),
    created_at            TIMESTAMPTZ NOT NULL DEFAULT now(),
    CHECK (maker_order_id <> taker_order_id),
    CHECK (maker_account_id <> taker_account_id)
);

CREATE INDEX trades_maker ON trades (maker_order_id);
CREATE INDEX trades_taker ON trades (taker_order_id);
CREATE INDEX trades_maker_account ON trades (maker_account_id, id DESC);
CREATE INDEX trades_taker_account ON trades (taker_account_id, id DESC);
