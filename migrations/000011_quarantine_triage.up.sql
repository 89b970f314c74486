-- Quarantine as seed 7.6.5 and 7.12.2 ask: what a person needs to triage a
-- message without decoding its body (a payload hash, a redacted snapshot,
-- its schema version and message key), how often and since when it has
-- failed, which kind of failure it is, the handler's own last error for a
-- dead letter, and an audited discard beside replay. A replay records what
-- its event did once the consumer applied it.

ALTER TABLE message_quarantine
    -- Computed by the database, so it always matches the stored body.
    ADD COLUMN payload_hash     bytea GENERATED ALWAYS AS (sha256(body)) STORED,
    ADD COLUMN payload_snapshot jsonb CHECK (payload_snapshot IS NULL OR octet_length(payload_snapshot::text) <= 16384),
    ADD COLUMN schema_version   integer CHECK (schema_version >= 1),
    ADD COLUMN message_key      text,
    ADD COLUMN category         text NOT NULL DEFAULT 'CODE_DEFECT'
        CHECK (category IN ('CODE_DEFECT', 'DATA_DEFECT', 'PERMISSION', 'DEPENDENCY', 'DIRTY_HISTORY')),
    ADD COLUMN first_failed_at  timestamptz,
    ADD COLUMN last_failed_at   timestamptz,
    ADD COLUMN delivery_count   integer NOT NULL DEFAULT 1 CHECK (delivery_count >= 1),
    ADD COLUMN last_error_code  text,
    ADD COLUMN last_error       text,
    ADD COLUMN discarded_at     timestamptz,
    ADD COLUMN discarded_by     text,
    ADD COLUMN discard_ticket   text,
    ADD COLUMN discard_reason   text;

-- Rows written before this migration: their failure is their receipt, and
-- their category a coarse reading of their code (new rows get it from
-- shared/quarantine.Categorize).
UPDATE message_quarantine SET
    first_failed_at = received_at,
    last_failed_at  = received_at,
    delivery_count  = greatest(delivery_attempt, 1),
    category = CASE
        WHEN error_class = 'dlq' THEN 'DEPENDENCY'
        WHEN error_code LIKE 'security.%' OR error_code LIKE '%.identity_mismatch' THEN 'PERMISSION'
        WHEN error_code LIKE '%.not_found' OR error_code = 'billing.no_reservation' THEN 'DIRTY_HISTORY'
        WHEN error_code IN ('envelope.unsupported_schema', 'event.type_not_handled', 'inbox.payload_mismatch') THEN 'CODE_DEFECT'
        WHEN error_code LIKE 'envelope.%' OR error_code LIKE 'payload.%' OR error_code LIKE '%.bad_key' OR error_code = 'not_cloudevent' THEN 'DATA_DEFECT'
        ELSE 'CODE_DEFECT' END;

-- DISCARDED was a valid status before anything audited it: such rows say
-- so instead of breaking the audit constraint.
UPDATE message_quarantine SET discarded_at = received_at, discarded_by = 'unknown (discarded before migration 11)',
    discard_ticket = 'none', discard_reason = 'discarded before discards were audited'
WHERE status = 'DISCARDED' AND discarded_at IS NULL;

ALTER TABLE message_quarantine
    ALTER COLUMN category DROP DEFAULT,
    ALTER COLUMN first_failed_at SET NOT NULL, ALTER COLUMN first_failed_at SET DEFAULT now(),
    ALTER COLUMN last_failed_at SET NOT NULL, ALTER COLUMN last_failed_at SET DEFAULT now(),
    ADD CONSTRAINT message_quarantine_failed_order CHECK (first_failed_at <= last_failed_at),
    -- A discard is audited: who, when, under which ticket and why.
    ADD CONSTRAINT message_quarantine_discard_audited CHECK (status <> 'DISCARDED' OR
        (discarded_at IS NOT NULL AND discarded_by IS NOT NULL AND discard_ticket IS NOT NULL AND discard_reason IS NOT NULL));

-- The seed's key: one row per consumer, event and payload, however often
-- and under however many broker message ids it failed (the relay may
-- publish an event twice). A message without a readable event id is keyed
-- by its bytes. Earlier duplicates under that key are folded into their
-- oldest row, the open one first.
WITH ranked AS (
    SELECT quarantine_id, first_value(quarantine_id) OVER w AS keep, count(*) OVER (PARTITION BY consumer_name, event_id, payload_hash) AS n,
        min(received_at) OVER (PARTITION BY consumer_name, event_id, payload_hash) AS first_at,
        max(received_at) OVER (PARTITION BY consumer_name, event_id, payload_hash) AS last_at
    FROM message_quarantine
    WINDOW w AS (PARTITION BY consumer_name, event_id, payload_hash ORDER BY (status = 'QUARANTINED') DESC, received_at, quarantine_id)
), kept AS (
    UPDATE message_quarantine q SET delivery_count = greatest(q.delivery_count, r.n),
        first_failed_at = r.first_at, last_failed_at = r.last_at
    FROM ranked r WHERE q.quarantine_id = r.keep AND r.quarantine_id = r.keep AND r.n > 1
)
DELETE FROM message_quarantine q USING ranked r WHERE q.quarantine_id = r.quarantine_id AND r.quarantine_id <> r.keep;

ALTER TABLE message_quarantine
    DROP CONSTRAINT message_quarantine_consumer_message_key,
    ADD CONSTRAINT message_quarantine_event_payload_key UNIQUE NULLS NOT DISTINCT (consumer_name, event_id, payload_hash);

COMMENT ON COLUMN message_quarantine.message_id IS 'Broker message id of the latest failing delivery.';
COMMENT ON COLUMN message_quarantine.payload_hash IS 'SHA-256 of the body; with consumer and event id the row''s identity, so a repeat updates it.';
COMMENT ON COLUMN message_quarantine.payload_snapshot IS 'The body for reading, at most 16 KiB, secrets redacted (shared/quarantine.Snapshot); the body column keeps it whole for replay.';
COMMENT ON COLUMN message_quarantine.category IS 'Seed 7.12.2''s triage: CODE_DEFECT, DATA_DEFECT, PERMISSION, DEPENDENCY or DIRTY_HISTORY, derived from the error code.';
COMMENT ON COLUMN message_quarantine.delivery_count IS 'Failed deliveries seen: the handler''s failures before a dead letter, plus every repeat of the message.';
COMMENT ON COLUMN message_quarantine.last_error_code IS 'Dead letters: the handler''s last error code, recorded by the source adapter before the broker moved the message.';

CREATE INDEX message_quarantine_message_id_idx ON message_quarantine (consumer_name, message_id);

-- delivery_failures ----------------------------------------------------------

CREATE TABLE delivery_failures (
    consumer_name   text        NOT NULL CHECK (consumer_name <> ''),
    message_id      text        NOT NULL CHECK (message_id <> ''),
    event_id        uuid,
    error_code      text        NOT NULL CHECK (error_code <> ''),
    error_detail    text,
    first_failed_at timestamptz NOT NULL DEFAULT now(),
    last_failed_at  timestamptz NOT NULL DEFAULT now(),
    failures        integer     NOT NULL DEFAULT 1 CHECK (failures >= 1),

    PRIMARY KEY (consumer_name, message_id)
);

COMMENT ON TABLE delivery_failures IS
    'The last retryable failure of a message still being redelivered, written by the source adapter on each failed delivery: '
    'when the broker gives up and moves it to the dead-letter topic, the drain copies the handler''s own error into message_quarantine. '
    'Removed when the message is settled; rows of messages that vanished otherwise are pruned after the replay window.';

CREATE INDEX delivery_failures_last_failed_at_idx ON delivery_failures (last_failed_at);

-- message_replays ------------------------------------------------------------

ALTER TABLE message_replays
    ADD COLUMN applied_at   timestamptz,
    ADD COLUMN after_report jsonb,
    ADD CONSTRAINT message_replays_applied CHECK (applied_at IS NULL OR (status = 'EXECUTED' AND after_report IS NOT NULL));

COMMENT ON COLUMN message_replays.applied_at IS 'When the consumer committed the replay event (its inbox row); NULL until then.';
COMMENT ON COLUMN message_replays.after_report IS 'The task''s state and side effects once the replay was applied: the after beside dry_run_report''s before.';
