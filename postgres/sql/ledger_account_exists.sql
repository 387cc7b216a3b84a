-- Whether the account $1 exists.
SELECT EXISTS (SELECT 1 FROM accounts WHERE id = $1)
