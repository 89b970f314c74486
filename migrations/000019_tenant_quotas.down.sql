DROP INDEX IF EXISTS assets_tenant_usage_idx;
ALTER TABLE tenants DROP COLUMN IF EXISTS max_stored_bytes, DROP COLUMN IF EXISTS max_assets;
