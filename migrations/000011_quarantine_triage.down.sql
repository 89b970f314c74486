ALTER TABLE message_replays
    DROP CONSTRAINT message_replays_applied,
    DROP COLUMN after_report,
    DROP COLUMN applied_at;

DROP TABLE delivery_failures;

DROP INDEX message_quarantine_message_id_idx;

-- Rows folded under one event can share a message id no longer: keep the
-- oldest of each.
DELETE FROM message_quarantine q USING message_quarantine o
WHERE q.consumer_name = o.consumer_name AND q.message_id = o.message_id
  AND (o.received_at, o.quarantine_id) < (q.received_at, q.quarantine_id);

-- DISCARDED stays a valid status of the older schema; its audit goes.
ALTER TABLE message_quarantine
    DROP CONSTRAINT message_quarantine_event_payload_key,
    ADD CONSTRAINT message_quarantine_consumer_message_key UNIQUE (consumer_name, message_id),
    DROP CONSTRAINT message_quarantine_discard_audited,
    DROP CONSTRAINT message_quarantine_failed_order,
    DROP COLUMN discard_reason,
    DROP COLUMN discard_ticket,
    DROP COLUMN discarded_by,
    DROP COLUMN discarded_at,
    DROP COLUMN last_error,
    DROP COLUMN last_error_code,
    DROP COLUMN delivery_count,
    DROP COLUMN last_failed_at,
    DROP COLUMN first_failed_at,
    DROP COLUMN category,
    DROP COLUMN message_key,
    DROP COLUMN schema_version,
    DROP COLUMN payload_snapshot,
    DROP COLUMN payload_hash;

COMMENT ON COLUMN message_quarantine.message_id IS 'Broker message id: the idempotency key for writing the quarantine row.';
