-- The account of the active API key whose hash is $1. No row: the key is
-- unknown or revoked.
SELECT account_id FROM api_keys WHERE key_hash = $1 AND revoked_at IS NULL
