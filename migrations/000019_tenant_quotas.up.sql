-- Per-tenant quotas on stored assets (seed 7.14.2: a tenant cannot take
-- what others need). NULL takes the deployment's default
-- (API_TENANT_MAX_ASSETS, API_TENANT_MAX_STORED_BYTES).

ALTER TABLE tenants
    ADD COLUMN max_assets       bigint CHECK (max_assets >= 0),
    ADD COLUMN max_stored_bytes bigint CHECK (max_stored_bytes >= 0);

COMMENT ON COLUMN tenants.max_assets IS 'Most assets (not FAILED) the tenant may keep; NULL: the deployment default. Set with adapter tenants quota.';
COMMENT ON COLUMN tenants.max_stored_bytes IS 'Most bytes of assets (not FAILED) the tenant may keep; NULL: the deployment default. Set with adapter tenants quota.';

-- A tenant's usage is summed at intake, from this index alone.
CREATE INDEX assets_tenant_usage_idx ON assets (tenant_id) INCLUDE (size_bytes) WHERE status <> 'FAILED';
