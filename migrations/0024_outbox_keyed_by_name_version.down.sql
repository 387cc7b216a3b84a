-- The outbox keyed by id with (name, version) unique, as 0002 and 0004 made
-- it.
ALTER TABLE outbox DROP CONSTRAINT outbox_pkey;
ALTER TABLE outbox ADD CONSTRAINT outbox_pkey PRIMARY KEY (id);
ALTER TABLE outbox ADD CONSTRAINT outbox_name_version_key UNIQUE (name, version);
