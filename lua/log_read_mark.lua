-- log_read_mark: write the mark that a reader of logs sends after its read
-- and before WAIT (emq ReadLogsReplicated), so the connection's replication
-- offset covers every write the read saw. A script rather than a SET, so
-- it runs with allow-oom (lua.go): a Redis at maxmemory must still let the
-- archiver read the logs that fill it.
--
-- KEYS[1] emq:{q}:replicated  string  the mark, expiring
--
-- ARGV[1] ttl_ms: how long the mark lives
--
-- Reply: 1
redis.call('SET', KEYS[1], '1', 'PX', ARGV[1])
return 1
