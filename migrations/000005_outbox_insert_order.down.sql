ALTER TABLE outbox_events ALTER COLUMN created_at SET DEFAULT now();

COMMENT ON COLUMN outbox_events.created_at IS NULL;
