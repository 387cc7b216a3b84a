DROP TABLE account_event_chunks;
