-- The durable record of every order that reached a final state. Admission
-- lives in Redis; a row appears here when the order is settled, rejected or
-- canceled, and the primary key makes that transition happen once.
CREATE TABLE orders (
    id               TEXT PRIMARY KEY CHECK (id ~ '^ORD_[0-9A-HJKMNP-TV-Z]{26}$'),
    account_id       TEXT NOT NULL REFERENCES accounts (id),
    client_order_id  TEXT NOT NULL CHECK (client_order_id ~ '^[A-Za-z0-9._:-]{1,64}$'),
    symbol           TEXT NOT NULL REFERENCES instruments (symbol),
    side             TEXT NOT NULL CHECK (side IN ('buy', 'sell')),
    type             TEXT NOT NULL CHECK (type IN ('limit', 'market')),
    quantity         NUMERIC(38, 18) NOT NULL CHECK (quantity > 0),
    -- the limit price; NULL for market orders
    price            NUMERIC(38, 18) CHECK (price > 0),
    status           TEXT NOT NULL CHECK (status IN ('settled', 'rejected', 'canceled')),
    reject_reason    TEXT,
    fill_price       NUMERIC(38, 18),
    fill_quantity    NUMERIC(38, 18),
    -- fill_price × fill_quantity, in the quote asset
    fill_notional    NUMERIC(38, 18),
    -- the queue's attempts token of the lease that settled the order
    settled_by_token BIGINT,
    ledger_transaction_id BIGINT UNIQUE REFERENCES ledger_transactions (id),
    created_at       TIMESTAMPTZ NOT NULL,
    finished_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    CHECK ((type = 'limit') = (price IS NOT NULL)),
    CHECK ((status = 'rejected') = (reject_reason IS NOT NULL)),
    CHECK ((status = 'settled') = (fill_price IS NOT NULL AND fill_quantity IS NOT NULL
                                   AND fill_notional IS NOT NULL AND ledger_transaction_id IS NOT NULL))
);

-- ORD ids are ULIDs: ordering by id is ordering by admission time, so the
-- newest-first listing with an id cursor is one index range scan.
CREATE INDEX orders_account_newest ON orders (account_id, id DESC);
CREATE INDEX orders_account_status_newest ON orders (account_id, status, id DESC);

-- The journal outbox: one row per changed balance, written in the same
-- transaction as the change, relayed to the coherence job queue after commit.
CREATE TABLE journal_outbox (
    id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- what changed, e.g. balances/ACC_.../USD
    name       TEXT NOT NULL,
    version    BIGINT NOT NULL CHECK (version > 0),
    payload    TEXT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    relayed_at TIMESTAMPTZ,
    UNIQUE (name, version)
);

CREATE INDEX journal_outbox_unrelayed ON journal_outbox (id) WHERE relayed_at IS NULL;

-- The last version the coherence consumer applied per name: a delivery at or
-- below it changes nothing, so duplicates and reordering are harmless.
CREATE TABLE journal_applied (
    name       TEXT PRIMARY KEY,
    version    BIGINT NOT NULL CHECK (version > 0),
    applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
