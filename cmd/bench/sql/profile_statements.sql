-- What pg_stat_statements counted, since its reset, of the statements run
-- in the database $1: per statement its text (constants as $n), whether it
-- ran at the top level (not inside a function or trigger), its calls, its
-- total execution time in milliseconds, the rows it returned or changed,
-- its shared buffers hit and read, and the WAL bytes it wrote.
SELECT s.query, s.toplevel, s.calls, s.total_exec_time, s.rows,
    s.shared_blks_hit, s.shared_blks_read, s.wal_bytes::bigint
FROM pg_stat_statements s
JOIN pg_database d ON d.oid = s.dbid
WHERE d.datname = $1
