-- Uploads: a tenant's own files enter as assets the client uploads
-- straight to object storage (seed 7.3: media bytes never pass through the
-- API or the broker). An upload is PENDING_UPLOAD until the client says it
-- is complete and the stored object matches the size and sha256 it
-- promised, PROCESSING while the probe stage reads it, then READY or FAILED
-- with a reason. Outputs and derivatives the pipeline stores itself are
-- READY once probed (outputs) or made (derivatives).

ALTER TABLE assets
    ADD COLUMN status text NOT NULL DEFAULT 'READY'
        CHECK (status IN ('PENDING_UPLOAD', 'PROCESSING', 'READY', 'FAILED')),
    ADD COLUMN media_type text CHECK (media_type IN ('VIDEO', 'AUDIO', 'IMAGE')),
    ADD COLUMN filename text CHECK (filename <> ''),
    ADD COLUMN client_idempotency_key text CHECK (client_idempotency_key <> ''),
    ADD COLUMN request_hash bytea,
    ADD COLUMN error_code text,
    ADD COLUMN error_message text,
    ADD COLUMN updated_at timestamptz NOT NULL DEFAULT now(),
    -- How often the reconciler re-emitted an upload's probe while it did
    -- not move: bounded, then the upload FAILS with that reason.
    ADD COLUMN rescues integer NOT NULL DEFAULT 0 CHECK (rescues >= 0),
    -- An upload is the only asset a client names by an idempotency key,
    -- and it says what it is.
    ADD CONSTRAINT assets_upload_declared CHECK (
        client_idempotency_key IS NULL OR (media_type IS NOT NULL AND request_hash IS NOT NULL AND task_id IS NULL AND kind = 'SOURCE')),
    ADD CONSTRAINT assets_failed_has_reason CHECK ((status = 'FAILED') = (error_code IS NOT NULL));

COMMENT ON COLUMN assets.status IS
    'PENDING_UPLOAD (presigned upload handed out), PROCESSING (stored, being probed), READY, FAILED (error_code says why).';
COMMENT ON COLUMN assets.media_type IS 'What an upload declared itself to be: VIDEO, AUDIO or IMAGE; NULL for what the pipeline made.';

-- One upload per tenant and idempotency key: a repeated POST /v1/assets
-- finds the asset instead of making another.
CREATE UNIQUE INDEX assets_upload_idempotency ON assets (tenant_id, client_idempotency_key)
    WHERE client_idempotency_key IS NOT NULL;
-- The tenant's listing, newest first, and the scanners' look at uploads
-- that stopped half-way.
CREATE INDEX assets_tenant_listing_idx ON assets (tenant_id, created_at DESC, asset_id DESC) WHERE source_asset_id IS NULL;
CREATE INDEX assets_unsettled_idx ON assets (status, updated_at) WHERE status IN ('PENDING_UPLOAD', 'PROCESSING');
