DROP INDEX assets_unsettled_idx;
DROP INDEX assets_tenant_listing_idx;
DROP INDEX assets_upload_idempotency;

ALTER TABLE assets
    DROP CONSTRAINT assets_failed_has_reason,
    DROP CONSTRAINT assets_upload_declared,
    DROP COLUMN rescues,
    DROP COLUMN updated_at,
    DROP COLUMN error_message,
    DROP COLUMN error_code,
    DROP COLUMN request_hash,
    DROP COLUMN client_idempotency_key,
    DROP COLUMN filename,
    DROP COLUMN media_type,
    DROP COLUMN status;
