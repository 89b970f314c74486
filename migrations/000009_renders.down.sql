DELETE FROM credit_reservations WHERE render_job_id IS NOT NULL;
ALTER TABLE credit_reservations
    DROP CONSTRAINT credit_reservations_one_payer,
    DROP COLUMN render_job_id,
    ALTER COLUMN task_id SET NOT NULL;
DROP TABLE render_chunks;
DELETE FROM render_jobs;
DROP INDEX render_jobs_unfinished_idx;
DROP INDEX render_jobs_tenant_created_idx;
DROP INDEX render_jobs_idempotency;
ALTER TABLE render_jobs
    DROP CONSTRAINT render_jobs_failed_has_reason,
    DROP COLUMN rescues,
    DROP COLUMN join_requested_at,
    DROP COLUMN reused,
    DROP COLUMN progress,
    DROP COLUMN priority,
    DROP COLUMN duration_us,
    DROP COLUMN render_key,
    DROP COLUMN profile,
    DROP COLUMN request_hash,
    DROP COLUMN client_idempotency_key,
    DROP CONSTRAINT render_jobs_revision_fk,
    ALTER COLUMN project_revision_id TYPE text USING project_revision_id::text,
    ADD CONSTRAINT render_jobs_project_revision_id_check CHECK (project_revision_id <> ''),
    ADD CONSTRAINT render_jobs_tenant_revision_spec UNIQUE (tenant_id, project_revision_id, render_spec_id);
