DROP TRIGGER orders_delete_waits ON orders;
DROP FUNCTION orders_delete_waits_for_trades();
DROP TRIGGER orders_stay_truncate ON orders;
DROP TRIGGER orders_stay ON orders;
DROP TRIGGER balances_stay_truncate ON balances;
DROP TRIGGER balances_stay ON balances;
DROP TRIGGER instruments_stay_truncate ON instruments;
DROP TRIGGER instruments_stay ON instruments;
DROP TRIGGER accounts_stay_truncate ON accounts;
DROP TRIGGER accounts_stay ON accounts;
DROP FUNCTION referenced_rows_stay();
DROP TRIGGER trades_keys_updated ON trades;
DROP TRIGGER orders_keys_updated ON orders;
DROP FUNCTION keys_updated_referenced();
DROP TRIGGER orders_referenced ON orders;
DROP FUNCTION orders_referenced();
DROP TRIGGER trades_referenced ON trades;
DROP FUNCTION trades_referenced();
DROP TRIGGER ledger_entries_referenced ON ledger_entries;
DROP FUNCTION ledger_entries_referenced();

ALTER TABLE orders ADD CONSTRAINT orders_account_id_fkey FOREIGN KEY (account_id) REFERENCES accounts (id),
    ADD CONSTRAINT orders_symbol_fkey FOREIGN KEY (symbol) REFERENCES instruments (symbol);
ALTER TABLE trades ADD CONSTRAINT trades_symbol_fkey FOREIGN KEY (symbol) REFERENCES instruments (symbol),
    ADD CONSTRAINT trades_maker_order_id_fkey FOREIGN KEY (maker_order_id) REFERENCES orders (id),
    ADD CONSTRAINT trades_taker_order_id_fkey FOREIGN KEY (taker_order_id) REFERENCES orders (id)
        DEFERRABLE INITIALLY DEFERRED,
    ADD CONSTRAINT trades_maker_account_id_fkey FOREIGN KEY (maker_account_id) REFERENCES accounts (id),
    ADD CONSTRAINT trades_taker_account_id_fkey FOREIGN KEY (taker_account_id) REFERENCES accounts (id),
    ADD CONSTRAINT trades_ledger_transaction_id_fkey FOREIGN KEY (ledger_transaction_id)
        REFERENCES ledger_transactions (id);
ALTER TABLE ledger_entries ADD CONSTRAINT ledger_entries_transaction_id_fkey
        FOREIGN KEY (transaction_id) REFERENCES ledger_transactions (id),
    ADD CONSTRAINT ledger_entries_account_id_asset_fkey
        FOREIGN KEY (account_id, asset) REFERENCES balances (account_id, asset);

CREATE INDEX ledger_entries_balance ON ledger_entries (account_id, asset);

DROP INDEX orders_ledger_transaction;
ALTER TABLE orders ADD CONSTRAINT orders_ledger_transaction_id_key UNIQUE (ledger_transaction_id);

DROP INDEX orders_sequence;
ALTER TABLE orders ADD CONSTRAINT orders_sequence_key UNIQUE (sequence);
