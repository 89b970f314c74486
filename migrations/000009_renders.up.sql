-- Final renders (seed 7.8.4): a render job renders one revision in one
-- profile, under the client's idempotency key, with a credit reservation
-- of its own. Its output is content-addressed: render_key hashes the spec,
-- the inputs' sha256, the profile and the encoder version, and the chunks
-- it is cut into are keyed by it, so an identical render (or one resumed
-- after a crash) finds what was rendered before.

ALTER TABLE render_jobs
    DROP CONSTRAINT render_jobs_tenant_revision_spec,
    DROP CONSTRAINT render_jobs_project_revision_id_check,
    ALTER COLUMN project_revision_id TYPE uuid USING project_revision_id::uuid,
    ADD CONSTRAINT render_jobs_revision_fk FOREIGN KEY (project_revision_id) REFERENCES project_revisions (revision_id),
    ADD COLUMN client_idempotency_key text NOT NULL CHECK (client_idempotency_key <> ''),
    ADD COLUMN request_hash bytea NOT NULL,
    ADD COLUMN profile text NOT NULL CHECK (profile <> ''),
    ADD COLUMN render_key text NOT NULL CHECK (render_key ~ '^[0-9a-f]{64}$'),
    ADD COLUMN duration_us bigint NOT NULL CHECK (duration_us > 0),
    ADD COLUMN priority integer NOT NULL DEFAULT 0,
    ADD COLUMN progress integer NOT NULL DEFAULT 0 CHECK (progress BETWEEN 0 AND 100),
    -- The output was already stored by an earlier render of the same
    -- content: no ffmpeg ran, and the product rule does not charge it.
    ADD COLUMN reused boolean NOT NULL DEFAULT false,
    -- When the last chunk asked for the join: the reconciler re-asks a
    -- join that did not finish.
    ADD COLUMN join_requested_at timestamptz,
    -- How often the reconciler re-emitted work of this render that did not
    -- move: bounded, then the render FAILS with that reason.
    ADD COLUMN rescues integer NOT NULL DEFAULT 0 CHECK (rescues >= 0),
    ADD CONSTRAINT render_jobs_failed_has_reason CHECK ((status = 'FAILED') = (error_code IS NOT NULL));

CREATE UNIQUE INDEX render_jobs_idempotency ON render_jobs (tenant_id, client_idempotency_key);
CREATE INDEX render_jobs_tenant_created_idx ON render_jobs (tenant_id, created_at);
CREATE INDEX render_jobs_unfinished_idx ON render_jobs (status, updated_at) WHERE status IN ('QUEUED', 'RENDERING');

COMMENT ON COLUMN render_jobs.render_spec_id IS 'sha256 (hex) of the revision''s render spec.';
COMMENT ON COLUMN render_jobs.render_key IS 'Content key of the output: the spec, every input''s sha256, the profile and the encoder version.';

-- One row per chunk of a render's output, shared by every render job of
-- the same content (tenant, render_key): a chunk is rendered once, by the
-- delivery that holds its lease, and stored under its own key.
CREATE TABLE render_chunks (
    tenant_id       uuid        NOT NULL REFERENCES tenants (tenant_id),
    render_key      text        NOT NULL,
    chunk_index     integer     NOT NULL CHECK (chunk_index >= 0),
    chunk_key       text        NOT NULL UNIQUE CHECK (chunk_key ~ '^[0-9a-f]{64}$'),
    from_us         bigint      NOT NULL CHECK (from_us >= 0),
    to_us           bigint      NOT NULL,
    status          text        NOT NULL DEFAULT 'PENDING' CHECK (status IN ('PENDING', 'RENDERING', 'DONE')),
    -- The delivery rendering it now, and until when its claim holds: a
    -- duplicate delivery finds the claim and starts no second ffmpeg run.
    lease_token     uuid,
    lease_until     timestamptz,
    attempts        integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    object_key      text,
    size_bytes      bigint      CHECK (size_bytes > 0),
    checksum_sha256 bytea       CHECK (octet_length(checksum_sha256) = 32),
    error_message   text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),

    PRIMARY KEY (tenant_id, render_key, chunk_index),
    CONSTRAINT render_chunks_window CHECK (to_us > from_us),
    CONSTRAINT render_chunks_claimed CHECK ((status = 'RENDERING') = (lease_token IS NOT NULL AND lease_until IS NOT NULL)),
    CONSTRAINT render_chunks_stored CHECK ((status = 'DONE') = (object_key IS NOT NULL AND checksum_sha256 IS NOT NULL AND size_bytes IS NOT NULL))
);

COMMENT ON TABLE render_chunks IS
    'Chunks of a render''s output (render_key), each rendered by one delivery within a Knative request and joined by stream copy.';

CREATE INDEX render_chunks_open_idx ON render_chunks (status, updated_at) WHERE status <> 'DONE';

-- A render holds a reservation of its own, like a generation task.
ALTER TABLE credit_reservations
    ALTER COLUMN task_id DROP NOT NULL,
    ADD COLUMN render_job_id uuid UNIQUE REFERENCES render_jobs (render_job_id),
    ADD CONSTRAINT credit_reservations_one_payer CHECK (num_nonnulls(task_id, render_job_id) = 1);

COMMENT ON COLUMN credit_reservations.render_job_id IS 'Render the reservation pays for; exactly one of task_id and render_job_id is set.';
