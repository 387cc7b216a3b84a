-- The current database's tables' counters: rows inserted, updated (of
-- which HOT, no index touched), deleted, and the scans that read them.
SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del,
    coalesce(seq_scan, 0), coalesce(idx_scan, 0)
FROM pg_stat_user_tables
