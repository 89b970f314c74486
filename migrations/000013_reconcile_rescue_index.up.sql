-- The reconcile scanner asks, for each task it would rescue, whether the
-- step it re-emitted last has been taken yet (functions/reconcile
-- rescueInFlight): the latest outbox row of that task it produced. Partial
-- on its own rows, so the hot insert path of every other producer pays
-- nothing for it.
CREATE INDEX outbox_events_reconcile_aggregate_idx ON outbox_events (aggregate_id, created_at)
    WHERE producer = 'reconcile';
