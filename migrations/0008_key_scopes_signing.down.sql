-- Without these columns a key could do everything with its bearer key
-- alone: keys narrower than that (a scope short, or requiring signatures)
-- are revoked first, so going down never widens what a key may do.
UPDATE api_keys SET revoked_at = now()
WHERE revoked_at IS NULL AND (signing_secret_sealed IS NOT NULL OR NOT scopes @> '{read,trade}'::TEXT[]);

ALTER TABLE api_keys DROP COLUMN signing_secret_sealed, DROP COLUMN scopes;
