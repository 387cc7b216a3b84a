-- The database $1's counters: transactions committed and rolled back,
-- blocks read from outside shared buffers and found in them, deadlocks,
-- temporary bytes, and the milliseconds spent reading and writing blocks
-- (track_io_timing).
SELECT xact_commit, xact_rollback, blks_read, blks_hit, deadlocks, temp_bytes,
    blk_read_time, blk_write_time
FROM pg_stat_database WHERE datname = $1
