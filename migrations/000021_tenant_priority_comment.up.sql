-- The comment of migration 2 promised that a higher priority runs first
-- when slots are scarce; nothing orders the waiting work by priority yet.
-- Say what the column does today.
COMMENT ON COLUMN tenants.priority IS 'The tenant''s priority (0-100): it picks the intake class of API_TENANT_RATE, and tenants below API_SHED_BELOW_PRIORITY are slowed down and shed first when the outbox falls behind.';
COMMENT ON COLUMN generation_tasks.priority IS 'The priority a request asked for (0-10), kept on the task; it orders nothing yet.';
