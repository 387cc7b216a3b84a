-- The active API keys, newest first, at most $1: each key's hash, KEY id,
-- account, scopes (text[]) and sealed signing secret (NULL: its requests
-- need no signature). A gateway loads them at start so its customers' keys
-- are recognized, and answered from memory, from the first request on.
SELECT key_hash, id, account_id, scopes, signing_secret_sealed FROM api_keys
WHERE revoked_at IS NULL ORDER BY created_at DESC LIMIT $1
