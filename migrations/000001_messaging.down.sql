DROP TABLE message_replays;
DROP TABLE message_quarantine;
DROP TABLE inbox_dedup;
DROP TRIGGER outbox_events_notify ON outbox_events;
DROP TABLE outbox_events;
DROP FUNCTION outbox_events_notify();
