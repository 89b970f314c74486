DROP TABLE render_jobs;
DROP TABLE assets;
DROP TRIGGER task_events_append_only ON task_events;
DROP TABLE task_events;
DROP FUNCTION reject_row_change();
DROP TABLE task_attempts;
DROP TABLE generation_tasks;
DROP TABLE api_keys;
DROP TABLE tenants;
