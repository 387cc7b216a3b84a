-- The transactions committed in the bench's database so far.
SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()
