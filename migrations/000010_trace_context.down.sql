ALTER TABLE render_jobs DROP COLUMN trace_parent;
ALTER TABLE generation_tasks DROP COLUMN trace_parent;
ALTER TABLE outbox_events DROP COLUMN trace_state, DROP COLUMN trace_parent;
