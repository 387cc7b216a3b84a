-- The sources of accounts' events. Settlement writes, per account and
-- instrument a batch touched, one outbox row "events:<account>:<symbol>"
-- holding what the batch did to the account's orders and fills there, at
-- the source's next version. Batches of one instrument commit one at a time
-- under its lock, so a source's versions follow its commits, and the relay
-- appends them to the account's log once each, in that order.
CREATE TABLE event_sources (
    name text PRIMARY KEY,
    version bigint NOT NULL CHECK (version > 0)
);
