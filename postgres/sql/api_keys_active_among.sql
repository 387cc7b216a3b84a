-- The active API keys among the hashes $1 (bytea[]): each key's hash, KEY
-- id, account, scopes (text[]) and sealed signing secret (NULL: its
-- requests need no signature). A hash with no row is unknown or revoked.
-- A gateway checks its event streams' keys that are due with it, in one
-- round trip (placement.KeyCache.AuthenticateAll), and refreshes the keys
-- in use before their copies expire (placement.KeyCache.RefreshAhead).
SELECT key_hash, id, account_id, scopes, signing_secret_sealed FROM api_keys
WHERE key_hash = ANY($1) AND revoked_at IS NULL
