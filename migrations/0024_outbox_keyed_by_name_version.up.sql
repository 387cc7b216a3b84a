-- The outbox keyed by (name, version), without an index on id (issue 24).
-- Every row version of the outbox (an insert by settlement, a non-HOT
-- stamp or a delete by the relay) took an entry in outbox_pkey (id) beside
-- the one in the unique (name, version) index, and no statement reads a row
-- by its id: settlement returns the rows it wrote, the relay settles them
-- by name and version (outbox_mark_relayed.sql), the sweep reads them by
-- age (outbox_unrelayed_since) and a relay's gap by name and version
-- (outbox_event_rows.sql). (name, version) becomes the primary key, so the
-- rows keep one; id stays a column, drawn from its identity, the sweep's
-- tiebreak among rows of the same age.
ALTER TABLE outbox DROP CONSTRAINT outbox_pkey;
ALTER TABLE outbox DROP CONSTRAINT outbox_name_version_key;
ALTER TABLE outbox ADD CONSTRAINT outbox_pkey PRIMARY KEY (name, version);
