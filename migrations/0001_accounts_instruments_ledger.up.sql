-- Amounts are NUMERIC(38,18): a fill's notional has as many decimals as its
-- price and quantity together, so NUMERIC keeps every product exact where
-- integer minor units would need a rounding rule on each fill.

CREATE TABLE assets (
    code  TEXT PRIMARY KEY CHECK (code ~ '^[A-Z0-9]{2,10}$'),
    -- decimals allowed in deposits and withdrawals of the asset
    scale SMALLINT NOT NULL CHECK (scale BETWEEN 0 AND 18)
);

INSERT INTO assets (code, scale) VALUES ('USD', 2), ('BTC', 8), ('ETH', 8);

CREATE TABLE accounts (
    id         TEXT PRIMARY KEY CHECK (id ~ '^ACC_[0-9A-HJKMNP-TV-Z]{26}$'),
    name       TEXT NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    kind       TEXT NOT NULL CHECK (kind IN ('customer', 'venue', 'external')),
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- The venue (the liquidity every order settles against) and the external world
-- (where deposits come from and withdrawals go) are one account each.
CREATE UNIQUE INDEX accounts_one_venue_one_external ON accounts (kind) WHERE kind IN ('venue', 'external');

INSERT INTO accounts (id, name, kind) VALUES
    ('ACC_0000000000000000000000000V', 'venue liquidity', 'venue'),
    ('ACC_0000000000000000000000000X', 'external world', 'external');

CREATE TABLE api_keys (
    id         TEXT PRIMARY KEY CHECK (id ~ '^KEY_[0-9A-HJKMNP-TV-Z]{26}$'),
    account_id TEXT NOT NULL REFERENCES accounts (id),
    -- SHA-256 of the key: a key is looked up by its hash, never stored or compared in clear
    key_hash   BYTEA NOT NULL UNIQUE CHECK (length(key_hash) = 32),
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    revoked_at TIMESTAMPTZ
);

CREATE INDEX api_keys_account ON api_keys (account_id);

CREATE TABLE instruments (
    symbol          TEXT PRIMARY KEY CHECK (symbol ~ '^[A-Z0-9]{2,10}-[A-Z0-9]{2,10}$'),
    base            TEXT NOT NULL REFERENCES assets (code),
    quote           TEXT NOT NULL REFERENCES assets (code),
    tick_size       NUMERIC(38, 18) NOT NULL CHECK (tick_size > 0),
    lot_size        NUMERIC(38, 18) NOT NULL CHECK (lot_size > 0),
    min_notional    NUMERIC(38, 18) NOT NULL CHECK (min_notional >= 0),
    reference_price NUMERIC(38, 18) NOT NULL CHECK (reference_price > 0),
    status          TEXT NOT NULL CHECK (status IN ('trading', 'halted')),
    CHECK (base <> quote),
    CHECK (symbol = base || '-' || quote)
);

INSERT INTO instruments (symbol, base, quote, tick_size, lot_size, min_notional, reference_price, status) VALUES
    ('BTC-USD', 'BTC', 'USD', 0.01,    0.00001, 10,     50000.00, 'trading'),
    ('ETH-USD', 'ETH', 'USD', 0.05,    0.001,   10,     3000.00,  'trading'),
    ('ETH-BTC', 'ETH', 'BTC', 0.00001, 0.005,   0.0001, 0.06000,  'trading');

CREATE TABLE balances (
    account_id TEXT NOT NULL REFERENCES accounts (id),
    asset      TEXT NOT NULL REFERENCES assets (code),
    available  NUMERIC(38, 18) NOT NULL DEFAULT 0,
    -- rises by one with every ledger entry on the balance: orders cached copies
    version    BIGINT NOT NULL DEFAULT 0 CHECK (version >= 0),
    PRIMARY KEY (account_id, asset),
    -- only the external world may go below zero: it is where money comes from
    CHECK (available >= 0 OR account_id = 'ACC_0000000000000000000000000X')
);

CREATE TABLE ledger_transactions (
    id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind       TEXT NOT NULL CHECK (kind IN ('deposit', 'withdrawal', 'settlement')),
    -- at most one ledger transaction per order
    order_id   TEXT UNIQUE,
    memo       TEXT NOT NULL DEFAULT '',
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    CHECK ((kind = 'settlement') = (order_id IS NOT NULL))
);

CREATE TABLE ledger_entries (
    id             BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    transaction_id BIGINT NOT NULL REFERENCES ledger_transactions (id),
    account_id     TEXT NOT NULL,
    asset          TEXT NOT NULL,
    -- signed: a debit is negative, a credit positive
    amount         NUMERIC(38, 18) NOT NULL CHECK (amount <> 0),
    FOREIGN KEY (account_id, asset) REFERENCES balances (account_id, asset)
);

CREATE INDEX ledger_entries_transaction ON ledger_entries (transaction_id);
CREATE INDEX ledger_entries_balance ON ledger_entries (account_id, asset);

-- Per asset, the entries of one transaction sum to zero. Checked at commit, so
-- a transaction may insert its entries one by one.
CREATE FUNCTION ledger_transaction_balanced() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    unbalanced TEXT;
BEGIN
    SELECT asset INTO unbalanced
      FROM ledger_entries
     WHERE transaction_id = NEW.transaction_id
     GROUP BY asset
    HAVING sum(amount) <> 0
     LIMIT 1;
    IF unbalanced IS NOT NULL THEN
        RAISE EXCEPTION 'ledger transaction % does not balance in %', NEW.transaction_id, unbalanced
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NULL;
END $$;

CREATE CONSTRAINT TRIGGER ledger_entries_balanced
    AFTER INSERT ON ledger_entries
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION ledger_transaction_balanced();

-- The ledger is append-only: a mistake is corrected by a new transaction.
CREATE FUNCTION ledger_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the ledger is append-only: % on % refused', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'restrict_violation';
END $$;

CREATE TRIGGER ledger_entries_append_only BEFORE UPDATE OR DELETE ON ledger_entries
    FOR EACH ROW EXECUTE FUNCTION ledger_append_only();
CREATE TRIGGER ledger_transactions_append_only BEFORE UPDATE OR DELETE ON ledger_transactions
    FOR EACH ROW EXECUTE FUNCTION ledger_append_only();
