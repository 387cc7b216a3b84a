-- The active API key whose hash is $1: its KEY id, account, scopes (text[])
-- and sealed signing secret (NULL: its requests need no signature). No row:
-- the key is unknown or revoked.
SELECT id, account_id, scopes, signing_secret_sealed FROM api_keys WHERE key_hash = $1 AND revoked_at IS NULL
