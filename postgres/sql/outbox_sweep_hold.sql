-- Bounds how long a sweep's transaction may sit idle, $1 (text, ms), for
-- the rest of the transaction: the rows it took stay locked while its
-- carry to Redis runs, and every other sweeper skips them. A worker
-- stopped in that carry (SIGSTOP, a stalled host) would hold them, and
-- the events and balances they announce, for as long as its connection
-- lives; past the bound PostgreSQL ends the session, the locks go, and
-- the next sweep carries the rows again (an append already made is a
-- dedup hit). Returns the setting.
SELECT set_config('idle_in_transaction_session_timeout', $1::text, true)
