-- The active API keys, newest first, at most $1: each key's hash and its
-- account. A gateway loads them at start so its customers' keys are
-- recognized, and answered from memory, from the first request on.
SELECT key_hash, account_id FROM api_keys WHERE revoked_at IS NULL ORDER BY created_at DESC LIMIT $1
