DROP INDEX IF EXISTS outbox_events_pending_group_idx;
