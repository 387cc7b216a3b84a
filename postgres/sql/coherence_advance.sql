-- Records the due versions of one coherence batch as applied, each only if
-- it is still newer than what the row holds (another applier may have
-- recorded a newer one since the read), in name order so concurrent batches
-- lock outbox_applied rows in the same order. Returns the names advanced.
-- $1, $2 are parallel arrays: name, version (one entry per name).
INSERT INTO outbox_applied (name, version)
SELECT name, version FROM unnest($1::text[], $2::bigint[]) AS r(name, version) ORDER BY name
ON CONFLICT (name) DO UPDATE SET version = EXCLUDED.version, applied_at = now()
WHERE outbox_applied.version < EXCLUDED.version
RETURNING name
