-- Moves the amount $4 of the asset $1 from the account $2's balance to the
-- account $3's, raising each version by one. Each changed balance gets a
-- outbox row in the same transaction, named $5 (the balance of $2) or $6
-- (of $3) as BalanceName spells them; the relay's sweep carries it to the
-- coherence queue, so cached balances learn of deposits and withdrawals too.
WITH changed AS (
    UPDATE balances
    SET available = available + CASE WHEN account_id = $2 THEN -$4::numeric ELSE $4::numeric END,
        version = version + 1
    WHERE asset = $1 AND account_id IN ($2, $3)
    RETURNING account_id, version),
named AS (
    SELECT CASE WHEN account_id = $2 THEN $5::text ELSE $6::text END AS name, version
    FROM changed)
INSERT INTO outbox (name, version, payload)
SELECT name, version, name || '@' || version
FROM named
