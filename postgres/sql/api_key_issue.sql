-- Stores the API key $1 (its KEY id) of the account $2 as its hash $3, with
-- its scopes $4 (text[]) and its sealed signing secret $5 (NULL: its
-- requests need no signature). Only a customer account gets one: no row
-- inserted, no such customer account.
INSERT INTO api_keys (id, account_id, key_hash, scopes, signing_secret_sealed)
SELECT $1, id, $3, $4, $5 FROM accounts WHERE id = $2 AND kind = 'customer'
