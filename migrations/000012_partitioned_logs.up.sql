-- outbox_events and inbox_dedup become time-partitioned, so that published
-- outbox rows and inbox rows can be pruned by dropping whole partitions once
-- they are outside the replay window (docs/design.md §4, seed 7.6.2, 7.6.3 and
-- 7.13.6: the tables and their indexes must not grow without bound). The
-- partitions are maintained by package shared/retention on the reconcile
-- tick; this file converts the existing tables.
--
-- # The partition key is event_id itself
--
-- Event ids are UUIDv7 (envelope.New): their first 48 bits are the Unix
-- time in milliseconds, and uuid compares bytewise, so a range of ids is a
-- range of creation times. Partitioning BY RANGE (event_id) gives:
--
--   - the primary keys stay what they were: PostgreSQL wants a partitioned
--     table's unique keys to contain the partition key, and event_id is in
--     outbox_events' key (event_id) and inbox_dedup's (consumer_name,
--     event_id). Uniqueness is still global, because an id always routes to
--     the same partition;
--   - a redelivered event always lands in the partition of its first
--     delivery, however much later it arrives, and hits the same key. With
--     processed_at (or created_at) as the key, a redelivery a day later
--     would go to another partition, find no row and be applied twice;
--   - the relay's mark-published and every lookup by id prune to one
--     partition.
--
-- Partitions are daily, named <table>_pYYYYMMDD (UTC), bounds from the
-- first id of the day ('<ms of 00:00 as 12 hex digits>00000000000000000000')
-- to the first of the next. Maintenance creates them days ahead.
--
-- # The default partition
--
-- Ids whose first 48 bits are no time of an existing partition go to
-- <table>_default: UUIDv4 ids (events driven by hand, whose leading bits are
-- random, so almost all of them fall in no day that has a partition) and
-- v7 ids of a day whose partition was missing. It is never dropped or pruned
-- automatically: nothing there says how old a row is in a way a partition
-- bound can. Maintenance reports its row count, and when it creates a
-- partition it first moves the default's rows of that range into it (they
-- belong there, and PostgreSQL refuses to attach a partition while the
-- default holds rows of its range).
--
-- # Existing rows
--
-- The old tables are not copied: each becomes the partition
-- <table>_history FOR VALUES FROM (MINVALUE) TO (the first id of
-- today - 7 days), keeping its rows, indexes and storage. Only its rows
-- from that day on (and v4 ids above it) are moved into the new daily
-- partitions (and the default). ATTACH then reads the history once to
-- check its range, without writing it. Maintenance drops the history like
-- any partition: when its upper bound is outside the replay window, none of
-- its rows was written within the window (a v4 id of yesterday may sort
-- into it) and, for the outbox, none is unpublished.
--
-- This file runs as one transaction and holds ACCESS EXCLUSIVE locks on
-- both tables until it commits: the outbox and inbox are unavailable for
-- about as long as it takes to move the last week of rows (measure on a
-- copy; run it in a quiet period).

-- outbox_events --------------------------------------------------------------

ALTER TABLE outbox_events RENAME TO outbox_events_history;
ALTER INDEX outbox_events_pkey RENAME TO outbox_events_history_pkey;
ALTER INDEX outbox_events_pending_idx RENAME TO outbox_events_history_pending_idx;
ALTER INDEX outbox_events_pending_group_idx RENAME TO outbox_events_history_pending_group_idx;
ALTER INDEX outbox_events_created_at_brin RENAME TO outbox_events_history_created_at_brin;
-- Inserts go through the parent, whose statement-level trigger notifies; a
-- partition keeps none of its own.
DROP TRIGGER outbox_events_notify ON outbox_events_history;

-- Same columns, defaults, checks (with their names) and comments.
CREATE TABLE outbox_events (LIKE outbox_events_history INCLUDING ALL EXCLUDING INDEXES) PARTITION BY RANGE (event_id);
ALTER TABLE outbox_events ADD CONSTRAINT outbox_events_pkey PRIMARY KEY (event_id);

COMMENT ON TABLE outbox_events IS
    'Transactional outbox: events written in the same transaction as the business change they announce; the relay is the only reader that publishes them to RocketMQ. '
    'event_id is the envelope id and never changes on republish, so consumers dedupe on it. '
    'Partitioned by RANGE (event_id): UUIDv7 ids start with their creation time, so each daily partition <table>_pYYYYMMDD holds the events of one UTC day, '
    'and the primary key stays event_id. Other ids go to outbox_events_default, which is never pruned. '
    'shared/retention creates partitions ahead and drops a partition only when it is outside the replay window and holds no unpublished row; rows are never deleted.';

-- The relay's claim query: pending rows in availability order. Partial, so
-- each partition's share stays as small as its backlog, however large the
-- published history grows (an old partition's is empty).
CREATE INDEX outbox_events_pending_idx
    ON outbox_events (available_at, created_at)
    WHERE published_at IS NULL;

-- The FIFO head check (000004).
CREATE INDEX outbox_events_pending_group_idx
    ON outbox_events (topic, message_group, created_at, event_id)
    WHERE published_at IS NULL AND message_group IS NOT NULL;

-- Pruning is by partition now. The BRIN still earns its keep: maintenance
-- drops a partition only if no row in it was written within the replay
-- window, a question it answers cheaply because rows arrive in created_at
-- order.
CREATE INDEX outbox_events_created_at_brin ON outbox_events USING brin (created_at);

CREATE TABLE outbox_events_default PARTITION OF outbox_events DEFAULT;
COMMENT ON TABLE outbox_events_default IS
    'Outbox rows whose event_id is in no daily partition (UUIDv4 ids, or a day whose partition was missing). Never dropped automatically.';

-- inbox_dedup ----------------------------------------------------------------

ALTER TABLE inbox_dedup RENAME TO inbox_dedup_history;
ALTER INDEX inbox_dedup_pkey RENAME TO inbox_dedup_history_pkey;
ALTER INDEX inbox_dedup_processed_at_brin RENAME TO inbox_dedup_history_processed_at_brin;

CREATE TABLE inbox_dedup (LIKE inbox_dedup_history INCLUDING ALL EXCLUDING INDEXES) PARTITION BY RANGE (event_id);
-- INSERT ... ON CONFLICT (consumer_name, event_id) DO NOTHING arbitrates on
-- this key: it contains the partition key, so it is one index per partition
-- and still unique across them.
ALTER TABLE inbox_dedup ADD CONSTRAINT inbox_dedup_pkey PRIMARY KEY (consumer_name, event_id);

COMMENT ON TABLE inbox_dedup IS
    'One row per (consumer group, event) whose effect committed. Inserted in the same transaction as the effect, '
    'so a redelivered event finds its row and is acknowledged without being applied twice. '
    'Partitioned by RANGE (event_id), not by processed_at: a redelivery, however late, routes to the partition of its first delivery and meets its row there. '
    'shared/retention drops a daily partition only when it is outside the replay window and none of its rows was processed within it; inbox_dedup_default is never dropped.';

-- See outbox_events_created_at_brin: the "written within the window" check.
CREATE INDEX inbox_dedup_processed_at_brin ON inbox_dedup USING brin (processed_at);

CREATE TABLE inbox_dedup_default PARTITION OF inbox_dedup DEFAULT;
COMMENT ON TABLE inbox_dedup_default IS
    'Inbox rows whose event_id is in no daily partition (UUIDv4 ids, or a day whose partition was missing). Never dropped automatically.';

-- Daily partitions, the rows of the last week, the history --------------------

DO $$
DECLARE
    today  timestamp := date_trunc('day', now() AT TIME ZONE 'UTC');
    first  timestamp := today - interval '7 days';
    cutoff uuid;
    t      text;
    d      timestamp;
BEGIN
    -- The first id of a UTC day: its milliseconds as the leading 48 bits.
    -- (shared/retention computes the same bounds.)
    cutoff := (lpad(to_hex((extract(epoch FROM first) * 1000)::bigint), 12, '0') || repeat('0', 20))::uuid;
    FOREACH t IN ARRAY ARRAY['outbox_events', 'inbox_dedup'] LOOP
        -- The week before today and three days ahead, as maintenance keeps
        -- them (its default); it creates what is missing on its first run.
        FOR i IN 0..10 LOOP
            d := first + make_interval(days => i);
            EXECUTE format('CREATE TABLE %I PARTITION OF %I FOR VALUES FROM (%L) TO (%L)',
                t || '_p' || to_char(d, 'YYYYMMDD'), t,
                lpad(to_hex((extract(epoch FROM d) * 1000)::bigint), 12, '0') || repeat('0', 20),
                lpad(to_hex((extract(epoch FROM d + interval '1 day') * 1000)::bigint), 12, '0') || repeat('0', 20));
        END LOOP;
        -- Rows from the first day on leave the history for their partition
        -- (or the default): the history must hold its range alone.
        EXECUTE format('WITH moved AS (DELETE FROM %I WHERE event_id >= %L RETURNING *) INSERT INTO %I SELECT * FROM moved',
            t || '_history', cutoff, t);
        EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (MINVALUE) TO (%L)', t, t || '_history', cutoff);
        EXECUTE format('COMMENT ON TABLE %I IS %L', t || '_history',
            'The rows of ' || t || ' from before it was partitioned, older than ' || to_char(first, 'YYYY-MM-DD') ||
            ' (UTC) by their event ids. Dropped as a whole like any partition once outside the replay window.');
    END LOOP;
END
$$;

-- Statement level on the parent: it fires for every INSERT INTO
-- outbox_events, whichever partitions the rows go to (000001 says why it
-- exists).
CREATE TRIGGER outbox_events_notify
    AFTER INSERT ON outbox_events
    FOR EACH STATEMENT
    EXECUTE FUNCTION outbox_events_notify();
