-- settle_lock.sql, settle_open.sql and settle_balances.sql as they were
-- before 0023 run their statements themselves; the makers' update goes
-- back to 0022's SQL function, the funds guard to its own settings.
DROP FUNCTION settlement_lock_balances(TEXT[], TEXT[]);
DROP FUNCTION settlement_open_balances(TEXT[], TEXT[]);
DROP FUNCTION settlement_move_balances(TEXT[], TEXT[], TEXT[], NUMERIC[], NUMERIC[], BIGINT[], TEXT);
ALTER FUNCTION settlement_funds_unchanged(TEXT[], TEXT[], NUMERIC[], NUMERIC[])
    RESET enable_seqscan RESET enable_hashjoin RESET enable_mergejoin RESET plan_cache_mode;
CREATE OR REPLACE FUNCTION settlement_update_makers(ids TEXT[], quantities NUMERIC[], notionals NUMERIC[], fees_paid NUMERIC[],
    holds NUMERIC[], statuses TEXT[], cancel_reasons TEXT[])
RETURNS void
LANGUAGE sql
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
AS $$
UPDATE orders o
SET filled_quantity = o.filled_quantity + m.quantity,
    filled_notional = o.filled_notional + m.notional,
    fees = o.fees + m.fees,
    hold = o.hold - m.hold,
    status = m.status,
    cancel_reason = coalesce(m.cancel_reason, o.cancel_reason),
    sequence = CASE WHEN m.status IN ('open', 'partially_filled') THEN o.sequence END,
    updated_at = now(),
    finished_at = CASE WHEN m.status IN ('open', 'partially_filled') THEN o.finished_at ELSE now() END
FROM unnest(ids, quantities, notionals, fees_paid, holds, statuses, cancel_reasons)
    AS m(id, quantity, notional, fees, hold, status, cancel_reason)
WHERE o.id = m.id
$$;
