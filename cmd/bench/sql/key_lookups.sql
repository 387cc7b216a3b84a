-- PostgreSQL's scans of api_keys so far: each key lookup of a gateway is
-- one (an index scan by key_hash, of one key, or of the several keys a
-- gateway's event streams check together), so their count over a window
-- is the lookups made in it. Statistics lag their backend's transaction
-- by up to a second under steady traffic.
SELECT coalesce(sum(coalesce(idx_scan, 0) + coalesce(seq_scan, 0)), 0)::bigint
FROM pg_stat_user_tables WHERE relname = 'api_keys'
