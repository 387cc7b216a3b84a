DROP TABLE event_sources;
