-- Stores the API key $1 (its KEY id) of the account $2 as its hash $3. Only a
-- customer account gets one: no row inserted, no such customer account.
INSERT INTO api_keys (id, account_id, key_hash)
SELECT $1, id, $3 FROM accounts WHERE id = $2 AND kind = 'customer'
