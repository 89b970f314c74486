-- Messaging backbone: the transactional outbox, the consumer inbox, and the
-- tables operators use when a message cannot be processed (quarantine) or
-- must be delivered again (replays). See docs/design.md §2, §4 and §6.
--
-- This file runs as one implicit transaction (golang-migrate sends it in a
-- single simple-protocol Exec), so it applies completely or not at all.

-- outbox_events --------------------------------------------------------------

CREATE TABLE outbox_events (
    event_id         uuid        PRIMARY KEY,
    event_type       text        NOT NULL CHECK (event_type <> ''),
    schema_version   integer     NOT NULL DEFAULT 1 CHECK (schema_version >= 1),
    producer         text        NOT NULL CHECK (producer <> ''),
    topic            text        NOT NULL CHECK (topic <> ''),
    tag              text        NOT NULL CHECK (tag <> ''),
    message_group    text        CHECK (message_group <> ''),
    deliver_at       timestamptz,
    aggregate_type   text        NOT NULL CHECK (aggregate_type <> ''),
    aggregate_id     text        NOT NULL CHECK (aggregate_id <> ''),
    tenant_id        uuid        NOT NULL,
    trace_id         text,
    correlation_id   text,
    causation_id     text,
    payload          jsonb       NOT NULL,
    headers          jsonb       NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(headers) = 'object'),
    occurred_at      timestamptz NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    available_at     timestamptz NOT NULL DEFAULT now(),
    published_at     timestamptz,
    publish_attempts integer     NOT NULL DEFAULT 0 CHECK (publish_attempts >= 0),
    last_error_code  text,
    last_error       text,
    lease_owner      text,
    lease_until      timestamptz,

    -- A lease is an owner plus an expiry; half a lease could never expire or
    -- could never be attributed.
    CONSTRAINT outbox_events_lease_complete CHECK ((lease_owner IS NULL) = (lease_until IS NULL))
);

COMMENT ON TABLE outbox_events IS
    'Transactional outbox: events written in the same transaction as the business change they announce; the relay is the only reader that publishes them to RocketMQ. '
    'event_id is the envelope id and never changes on republish, so consumers dedupe on it. '
    'Designed to be partitioned by created_at and pruned outside the replay window, but not partitioned yet: '
    'PostgreSQL requires a partitioned table''s primary key to include the partition key, and uniqueness of event_id alone is the contract.';
COMMENT ON COLUMN outbox_events.event_id IS 'Envelope event id (UUIDv7 preferred). Stable across republishes; the broker message key.';
COMMENT ON COLUMN outbox_events.topic IS 'Physical broker topic (for example generation.submit.delay), not the logical topic.';
COMMENT ON COLUMN outbox_events.message_group IS 'FIFO message group (the aggregate id); set only for FIFO topics.';
COMMENT ON COLUMN outbox_events.deliver_at IS 'Broker delivery timestamp; set only for DELAY topics.';
COMMENT ON COLUMN outbox_events.tenant_id IS 'Owning tenant. No foreign key: outbox rows are pruned by time and must not hold tenants in place.';
COMMENT ON COLUMN outbox_events.payload IS 'CloudEvents data: ids, versions and references only; never media, secrets or long-lived URLs (max 64 KiB, checked by the envelope package).';
COMMENT ON COLUMN outbox_events.available_at IS 'Earliest time the relay may try this row again; pushed forward as publish backoff.';
COMMENT ON COLUMN outbox_events.published_at IS 'When the broker acknowledged the send; NULL while the row is pending.';
COMMENT ON COLUMN outbox_events.lease_owner IS 'Relay instance that claimed the row; a claim expires at lease_until so a crashed relay cannot strand rows.';

-- The relay's claim query: pending rows in availability order. Partial, so
-- it stays as small as the backlog however large the published history grows.
CREATE INDEX outbox_events_pending_idx
    ON outbox_events (available_at, created_at)
    WHERE published_at IS NULL;

-- Pruning by age until the table is partitioned. BRIN: rows arrive in
-- created_at order, and a B-tree here would tax every insert on the hot path.
CREATE INDEX outbox_events_created_at_brin ON outbox_events USING brin (created_at);

-- Wake the relay as soon as events commit instead of waiting for its next
-- poll. Statement level, so a batch insert sends one notification; NOTIFY is
-- delivered only on commit and identical notifications in one transaction
-- are folded into one. The payload is empty: the relay re-reads the table,
-- so a lost notification only costs latency (the relay still polls).
CREATE FUNCTION outbox_events_notify() RETURNS trigger
    LANGUAGE plpgsql AS
$$
BEGIN
    PERFORM pg_notify('outbox_events', '');
    RETURN NULL;
END
$$;

COMMENT ON FUNCTION outbox_events_notify() IS
    'NOTIFY outbox_events after rows are inserted, so a LISTENing relay publishes without waiting for its poll interval.';

CREATE TRIGGER outbox_events_notify
    AFTER INSERT ON outbox_events
    FOR EACH STATEMENT
    EXECUTE FUNCTION outbox_events_notify();

-- inbox_dedup ----------------------------------------------------------------

CREATE TABLE inbox_dedup (
    consumer_name text        NOT NULL CHECK (consumer_name <> ''),
    event_id      uuid        NOT NULL,
    result_code   text        NOT NULL CHECK (result_code IN ('APPLIED', 'STALE_NOOP')),
    payload_hash  bytea       NOT NULL CHECK (octet_length(payload_hash) = 32),
    processed_at  timestamptz NOT NULL DEFAULT now(),

    PRIMARY KEY (consumer_name, event_id)
);

COMMENT ON TABLE inbox_dedup IS
    'One row per (consumer group, event) whose effect committed. Inserted in the same transaction as the effect, '
    'so a redelivered event finds its row and is acknowledged without being applied twice. '
    'Designed to be partitioned by processed_at and pruned outside the replay window; not partitioned yet because '
    'the primary key would then have to include processed_at and would no longer deduplicate.';
COMMENT ON COLUMN inbox_dedup.consumer_name IS 'RocketMQ consumer group name (for example cg.scheduler.submit.v1).';
COMMENT ON COLUMN inbox_dedup.result_code IS 'APPLIED: the effect happened. STALE_NOOP: the event was older than the state it targeted and changed nothing.';
COMMENT ON COLUMN inbox_dedup.payload_hash IS 'SHA-256 of the payload, to tell a redelivery from a different event reusing the same id.';

CREATE INDEX inbox_dedup_processed_at_brin ON inbox_dedup USING brin (processed_at);

-- message_quarantine ---------------------------------------------------------

CREATE TABLE message_quarantine (
    quarantine_id    uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    consumer_name    text        NOT NULL CHECK (consumer_name <> ''),
    event_id         uuid,
    message_id       text        NOT NULL CHECK (message_id <> ''),
    topic            text        NOT NULL CHECK (topic <> ''),
    tag              text,
    error_class      text        NOT NULL CHECK (error_class <> ''),
    error_code       text        NOT NULL CHECK (error_code <> ''),
    error_detail     text,
    delivery_attempt integer     NOT NULL CHECK (delivery_attempt >= 0),
    properties       jsonb       NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(properties) = 'object'),
    body             bytea       NOT NULL,
    source           text        NOT NULL CHECK (source IN ('ADAPTER', 'DLQ')),
    status           text        NOT NULL DEFAULT 'QUARANTINED' CHECK (status IN ('QUARANTINED', 'REPLAYED', 'DISCARDED')),
    received_at      timestamptz NOT NULL DEFAULT now(),

    -- The adapter may write the same message twice (crash between insert and
    -- ACK, or once from the adapter and again from the DLQ drain):
    -- INSERT ... ON CONFLICT DO NOTHING on this key keeps one row.
    CONSTRAINT message_quarantine_consumer_message_key UNIQUE (consumer_name, message_id)
);

COMMENT ON TABLE message_quarantine IS
    'Messages a consumer could not process: permanent failures written by the source adapter, and the dead-letter queues drained into it. '
    'Kept whole (properties and body) so an operator can inspect and replay them.';
COMMENT ON COLUMN message_quarantine.event_id IS 'Envelope event id when it could be parsed; NULL for malformed messages.';
COMMENT ON COLUMN message_quarantine.message_id IS 'Broker message id: the idempotency key for writing the quarantine row.';
COMMENT ON COLUMN message_quarantine.source IS 'ADAPTER: quarantined on a permanent error. DLQ: drained from %DLQ%<group> after the broker gave up retrying.';

-- The admin list: open items, oldest first.
CREATE INDEX message_quarantine_status_received_idx ON message_quarantine (status, received_at);
CREATE INDEX message_quarantine_event_id_idx ON message_quarantine (event_id) WHERE event_id IS NOT NULL;

-- message_replays ------------------------------------------------------------

CREATE TABLE message_replays (
    replay_id         uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    original_event_id uuid        NOT NULL,
    replay_event_id   uuid        UNIQUE,
    consumer_name     text        NOT NULL CHECK (consumer_name <> ''),
    topic             text        NOT NULL CHECK (topic <> ''),
    ticket            text        NOT NULL CHECK (ticket <> ''),
    operator          text        NOT NULL CHECK (operator <> ''),
    reason            text        NOT NULL CHECK (reason <> ''),
    status            text        NOT NULL DEFAULT 'DRY_RUN' CHECK (status IN ('DRY_RUN', 'APPROVED', 'EXECUTED', 'REJECTED')),
    dry_run_report    jsonb,
    created_at        timestamptz NOT NULL DEFAULT now(),
    approved_at       timestamptz,
    executed_at       timestamptz,

    -- The audit trail must say when a replay was approved and run.
    CONSTRAINT message_replays_approved_at CHECK (status NOT IN ('APPROVED', 'EXECUTED') OR approved_at IS NOT NULL),
    CONSTRAINT message_replays_executed_at CHECK (status <> 'EXECUTED' OR executed_at IS NOT NULL)
);

COMMENT ON TABLE message_replays IS
    'Audit of every operator replay: who, why, under which ticket, what the dry run found, and the event id the replay was sent with. '
    'No foreign key to outbox_events: the original may already be pruned.';
COMMENT ON COLUMN message_replays.replay_event_id IS 'Id of the event that carries the replay; unique so one replay cannot be executed twice. NULL until executed.';

CREATE INDEX message_replays_original_event_id_idx ON message_replays (original_event_id);
