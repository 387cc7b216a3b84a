-- A settlement write's outbox row carries each moved balance's new
-- amounts (issue 24): "<name>@<version> <available> <held>" a line, so the
-- coherence consumer fills the cache from the job and does not read the
-- balances back from PostgreSQL (balance_read_named.sql, a transaction a
-- write). The amounts are spelled as balance_read_named.sql spells them:
-- at least the asset's decimals, more only where a fill left them.
--
-- A new overload, p_values the eighth argument: binaries of earlier
-- releases call the seven-argument function, unchanged, and keep writing
-- "<name>@<version>" lines, which their consumers read; a new binary writes
-- the plain form too while such consumers run (p_values false,
-- COHERENCE_BALANCE_AMOUNTS=false). The row-per-balance form (p_row '')
-- stays "<name>@<version>": it is the rollout form for releases older still.
CREATE FUNCTION settlement_move_balances(p_names TEXT[], p_accounts TEXT[], p_assets TEXT[], p_available NUMERIC[],
    p_held NUMERIC[], p_steps BIGINT[], p_row TEXT, p_values BOOLEAN)
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
        RETURNING m.position, m.name, b.version, b.asset, b.available, b.held
    ),
    listed AS (
        -- No group, so one row, or none when nothing moved: the sequence
        -- is read only for a row that is written. The assets' scales are
        -- read only for the lines that carry amounts (one probe of
        -- assets_pkey a balance).
        SELECT nextval('outbox_id_seq') AS id,
            string_agg(reached.name || '@' || reached.version || CASE WHEN p_values THEN
                    ' ' || round(reached.available, greatest(scale(trim_scale(reached.available)), a.scale))::text
                    || ' ' || round(reached.held, greatest(scale(trim_scale(reached.held)), a.scale))::text
                ELSE '' END,
                E'\n' ORDER BY reached.position) AS payload
        FROM reached
        LEFT JOIN assets a ON p_values AND a.code = reached.asset
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
