-- A new ledger transaction of the kind $1 (deposit or withdrawal); returns its id.
INSERT INTO ledger_transactions (kind) VALUES ($1) RETURNING id
