-- Bounds how long a take-over's transaction waits for a row lock ($1, an
-- interval as text, '1s'): the first statement of TakeOver's transaction,
-- for its end only (set_config local). A transaction stuck holding the
-- instrument row (an owner or a locked batch stopped mid-write) then fails
-- the take-over with lock_not_available (SQLSTATE 55P03) instead of
-- holding it; the worker tries again while it holds the lease. Returns the
-- setting.
SELECT set_config('lock_timeout', $1::text, true)
