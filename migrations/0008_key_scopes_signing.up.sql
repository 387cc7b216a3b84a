-- API keys get scopes, and may require signed requests.
--
-- scopes: what the key may do, one or both of 'read' (the caller's orders,
-- fills and balances) and 'trade' (place and cancel). Keys issued before
-- this migration could do both, and keep both. The default stays: during
-- a rolling upgrade a writer from before scopes (admin issue-key, admin
-- demo) still inserts keys without naming them, and its keys do what its
-- gateways let every key do; this release's writers always name them.
--
-- signing_secret_sealed: NULL for a key whose requests need no signature.
-- Otherwise the key's signing secret sealed with AES-256-GCM under the
-- gateways' SIGNING_KEY_ENCRYPTION_KEY: a 12-byte nonce, then the
-- ciphertext and its 16-byte tag, with the key's id as additional data.
-- The secret itself is never stored.
ALTER TABLE api_keys
    ADD COLUMN scopes TEXT[] NOT NULL DEFAULT '{read,trade}'
        CHECK (cardinality(scopes) > 0 AND scopes <@ '{read,trade}'::TEXT[]),
    ADD COLUMN signing_secret_sealed BYTEA CHECK (length(signing_secret_sealed) > 28);

