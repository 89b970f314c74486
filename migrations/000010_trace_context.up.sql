-- The span that produced an event, so that its handler's span is that
-- span's child and one generation or render is one trace. trace_id stays
-- the contract field (docs/design.md §2); trace_parent, when set, is a W3C
-- traceparent of that trace id.
ALTER TABLE outbox_events
    ADD COLUMN trace_parent text CHECK (trace_parent IS NULL OR (trace_id IS NOT NULL AND substr(trace_parent, 4, 32) = trace_id)),
    ADD COLUMN trace_state  text CHECK (trace_state IS NULL OR trace_parent IS NOT NULL);
COMMENT ON COLUMN outbox_events.trace_parent IS
    'W3C traceparent of the span that wrote the event (the parent of its handler''s span); NULL: the producer ran no tracer';
COMMENT ON COLUMN outbox_events.trace_state IS 'W3C tracestate beside trace_parent';

-- The span of the request that created the aggregate: what a provider
-- callback or a reconciler re-drive continues, since neither arrives with
-- the trace of its own.
ALTER TABLE generation_tasks ADD COLUMN trace_parent text;
COMMENT ON COLUMN generation_tasks.trace_parent IS
    'W3C traceparent of the request that created the task; provider callbacks and reconciler re-drives continue its trace';
ALTER TABLE render_jobs ADD COLUMN trace_parent text;
COMMENT ON COLUMN render_jobs.trace_parent IS
    'W3C traceparent of the request that created the render; reconciler re-drives continue its trace';
