-- The outbox without its index of relayed rows: nothing prunes them then.
DROP INDEX outbox_relayed_since;
