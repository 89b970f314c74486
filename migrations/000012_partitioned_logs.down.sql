-- Back to one plain table each, with every row still in a partition (the
-- default's too), and the objects and comments 000001-000010 gave them.

CREATE TABLE outbox_events_plain (LIKE outbox_events INCLUDING ALL EXCLUDING INDEXES);
INSERT INTO outbox_events_plain SELECT * FROM outbox_events;
DROP TABLE outbox_events; -- its partitions, indexes and trigger with it
ALTER TABLE outbox_events_plain RENAME TO outbox_events;
ALTER TABLE outbox_events ADD CONSTRAINT outbox_events_pkey PRIMARY KEY (event_id);
CREATE INDEX outbox_events_pending_idx
    ON outbox_events (available_at, created_at)
    WHERE published_at IS NULL;
CREATE INDEX outbox_events_pending_group_idx
    ON outbox_events (topic, message_group, created_at, event_id)
    WHERE published_at IS NULL AND message_group IS NOT NULL;
CREATE INDEX outbox_events_created_at_brin ON outbox_events USING brin (created_at);
CREATE TRIGGER outbox_events_notify
    AFTER INSERT ON outbox_events
    FOR EACH STATEMENT
    EXECUTE FUNCTION outbox_events_notify();
COMMENT ON TABLE outbox_events IS
    'Transactional outbox: events written in the same transaction as the business change they announce; the relay is the only reader that publishes them to RocketMQ. '
    'event_id is the envelope id and never changes on republish, so consumers dedupe on it. '
    'Designed to be partitioned by created_at and pruned outside the replay window, but not partitioned yet: '
    'PostgreSQL requires a partitioned table''s primary key to include the partition key, and uniqueness of event_id alone is the contract.';

CREATE TABLE inbox_dedup_plain (LIKE inbox_dedup INCLUDING ALL EXCLUDING INDEXES);
INSERT INTO inbox_dedup_plain SELECT * FROM inbox_dedup;
DROP TABLE inbox_dedup;
ALTER TABLE inbox_dedup_plain RENAME TO inbox_dedup;
ALTER TABLE inbox_dedup ADD CONSTRAINT inbox_dedup_pkey PRIMARY KEY (consumer_name, event_id);
CREATE INDEX inbox_dedup_processed_at_brin ON inbox_dedup USING brin (processed_at);
COMMENT ON TABLE inbox_dedup IS
    'One row per (consumer group, event) whose effect committed. Inserted in the same transaction as the effect, '
    'so a redelivered event finds its row and is acknowledged without being applied twice. '
    'Designed to be partitioned by processed_at and pruned outside the replay window; not partitioned yet because '
    'the primary key would then have to include processed_at and would no longer deduplicate.';
