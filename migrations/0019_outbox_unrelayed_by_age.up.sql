-- The sweep's index by age (issue 24). The sweep (outbox_sweep.sql) takes
-- the unrelayed rows older than 5 s, in every worker every second. By
-- outbox_unrelayed (id) it read every unrelayed row to find the old ones:
-- the relay carries rows within a second of their commit, so those are
-- nearly all young, and the index also holds an entry for every row
-- relayed since the last vacuum (a delete or a stamp leaves it behind):
-- ~14 ms a call, the heap fetch of a few thousand rows to keep none. By
-- age, a sweep with nothing to do reads the few entries older than 5 s.
-- (created_at, id): oldest first as before, ties in id order.
CREATE INDEX outbox_unrelayed_since ON outbox (created_at, id) WHERE relayed_at IS NULL;
DROP INDEX outbox_unrelayed;
