-- The relay publishes a FIFO message group in order: it claims a row only
-- when no earlier row of the same (topic, message_group) is unpublished.
-- This partial index answers that check from the pending rows alone.
CREATE INDEX outbox_events_pending_group_idx
    ON outbox_events (topic, message_group, created_at, event_id)
    WHERE published_at IS NULL AND message_group IS NOT NULL;
