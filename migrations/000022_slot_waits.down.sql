COMMENT ON COLUMN tenants.priority IS 'The tenant''s priority (0-100): it picks the intake class of API_TENANT_RATE, and tenants below API_SHED_BELOW_PRIORITY are slowed down and shed first when the outbox falls behind.';
COMMENT ON COLUMN generation_tasks.priority IS 'The priority a request asked for (0-10), kept on the task; it orders nothing yet.';
DROP TABLE slot_wait_tags;
DROP TABLE slot_wait_scopes;
DROP TABLE slot_waits;
