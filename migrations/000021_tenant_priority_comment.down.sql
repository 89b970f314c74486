COMMENT ON COLUMN tenants.priority IS 'Scheduling weight for the tenant''s work; higher runs first when slots are scarce.';
COMMENT ON COLUMN generation_tasks.priority IS NULL;
