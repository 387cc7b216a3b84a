-- The server's WAL counters: records, full-page images, bytes, the times
-- its buffers were full, its writes and syncs (fsyncs), and the
-- milliseconds those took (track_wal_io_timing).
SELECT wal_records, wal_fpi, wal_bytes::bigint, wal_buffers_full, wal_write, wal_sync,
    wal_write_time, wal_sync_time
FROM pg_stat_wal
