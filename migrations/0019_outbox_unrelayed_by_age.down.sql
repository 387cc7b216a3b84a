-- The sweep's index by id, as migrations 0002 and 0004 made it.
CREATE INDEX outbox_unrelayed ON outbox (id) WHERE relayed_at IS NULL;
DROP INDEX outbox_unrelayed_since;
