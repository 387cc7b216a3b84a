-- Revokes the active API key $1 (its KEY id) and returns its hash, which the
-- revocation broadcast names. No row: no active key has the id.
UPDATE api_keys SET revoked_at = now() WHERE id = $1 AND revoked_at IS NULL RETURNING key_hash
