-- A settlement write's statements plan once per connection (issue 24). An
-- owner's write runs with generic plans (settle_owned_fence.sql sets
-- plan_cache_mode for its transaction), which are made without the
-- batch's arrays and so guess 100 rows for each unnest; against balances,
-- whose 1,000 accounts make 3,000 rows, or a table whose statistics
-- predate its growth, that guess hashed the table whole: on a fresh
-- database the lock, the funds guard, the opening and the move of the
-- balances each scanned balances (and the opening accounts) on every
-- write. These statements now run in functions that price scans and hash
-- and merge joins out, as the key checks of 0016 and the makers' update of
-- 0022 do: each balance is one probe of balances_pkey, whatever the
-- statistics and the batch's size. PL/pgSQL, not SQL: PostgreSQL 15 plans
-- a SQL function's statements again on every call of the statement that
-- calls it, PL/pgSQL keeps them for the session; plan_cache_mode is forced
-- to generic for each, so no caller (a cancel, an unowned batch) plans them
-- more than once either.

-- settle_lock.sql: the balance rows p_accounts × p_assets (parallel
-- arrays) locked in (account, asset) order, as that file says.
CREATE FUNCTION settlement_lock_balances(p_accounts TEXT[], p_assets TEXT[])
RETURNS TABLE (account_id TEXT, asset TEXT, version BIGINT, available TEXT, held TEXT)
LANGUAGE plpgsql
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT b.account_id, b.asset, b.version, trim_scale(b.available)::text, trim_scale(b.held)::text
    FROM balances b
    WHERE (b.account_id, b.asset) IN (SELECT * FROM unnest(p_accounts, p_assets))
    ORDER BY b.account_id, b.asset
    FOR NO KEY UPDATE OF b;
END
$$;

-- settle_open.sql: opens the balance rows p_accounts × p_assets that do
-- not exist yet, in (account, asset) order, as that file says.
CREATE FUNCTION settlement_open_balances(p_accounts TEXT[], p_assets TEXT[])
RETURNS void
LANGUAGE plpgsql
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    INSERT INTO balances (account_id, asset)
    SELECT b.account_id, b.asset
    FROM unnest(p_accounts, p_assets) AS b(account_id, asset)
    JOIN accounts a ON a.id = b.account_id
    WHERE NOT EXISTS (SELECT 1 FROM balances x WHERE x.account_id = b.account_id AND x.asset = b.asset)
    ORDER BY b.account_id, b.asset
    ON CONFLICT DO NOTHING;
END
$$;

-- settle_balances.sql: moves the balances and writes the outbox rows that
-- announce them, with its parameters and rows. Each moved row is returned
-- with the position and name of its arrays' element, so no join finds them
-- again (with hash joins priced out, a join of the moved rows to the names
-- would compare every pair).
CREATE FUNCTION settlement_move_balances(p_names TEXT[], p_accounts TEXT[], p_assets TEXT[], p_available NUMERIC[],
    p_held NUMERIC[], p_steps BIGINT[], p_row TEXT)
RETURNS TABLE (id BIGINT, name TEXT, version BIGINT, payload TEXT)
LANGUAGE plpgsql
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH reached AS (
        UPDATE balances b
        SET available = b.available + m.available, held = b.held + m.held, version = b.version + m.steps
        FROM unnest(p_names, p_accounts, p_assets, p_available, p_held, p_steps) WITH ORDINALITY
            AS m(name, account_id, asset, available, held, steps, position)
        WHERE b.account_id = m.account_id AND b.asset = m.asset
        RETURNING m.position, m.name, b.version
    ),
    listed AS (
        -- No group, so one row, or none when nothing moved: the sequence
        -- is read only for a row that is written.
        SELECT nextval('outbox_id_seq') AS id,
            string_agg(reached.name || '@' || reached.version, E'\n' ORDER BY reached.position) AS payload
        FROM reached
        WHERE p_row <> ''
        HAVING count(*) > 0
    )
    INSERT INTO outbox AS o (id, name, version, payload) OVERRIDING SYSTEM VALUE
    SELECT listed.id, p_row, listed.id, listed.payload
    FROM listed
    UNION ALL
    SELECT nextval('outbox_id_seq'), ordered.name, ordered.version, ordered.name || '@' || ordered.version
    FROM (SELECT * FROM reached WHERE p_row = '' ORDER BY reached.position) AS ordered
    RETURNING o.id, o.name, o.version, o.payload;
END
$$;

-- settle_guard.sql's check (0006) joined its balances the same way.
ALTER FUNCTION settlement_funds_unchanged(TEXT[], TEXT[], NUMERIC[], NUMERIC[])
    SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
    SET plan_cache_mode = force_generic_plan;

-- The makers' update of 0022, in PL/pgSQL so that its plan is kept.
CREATE OR REPLACE FUNCTION settlement_update_makers(ids TEXT[], quantities NUMERIC[], notionals NUMERIC[], fees_paid NUMERIC[],
    holds NUMERIC[], statuses TEXT[], cancel_reasons TEXT[])
RETURNS void
LANGUAGE plpgsql
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
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
    WHERE o.id = m.id;
END
$$;
