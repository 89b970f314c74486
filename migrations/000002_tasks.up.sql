-- Tenants and their keys, generation tasks with their attempts and
-- timeline, media assets, and render jobs. See docs/design.md §4 and §5.
--
-- This file runs as one implicit transaction.

-- tenants and api_keys -------------------------------------------------------

CREATE TABLE tenants (
    tenant_id  uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    name       text        NOT NULL CHECK (name <> ''),
    status     text        NOT NULL DEFAULT 'ACTIVE' CHECK (status IN ('ACTIVE', 'SUSPENDED', 'CLOSED')),
    priority   integer     NOT NULL DEFAULT 0,
    created_at timestamptz NOT NULL DEFAULT now()
);

COMMENT ON TABLE tenants IS 'Customers. Every task, asset, render and credit belongs to exactly one tenant, and no query crosses tenants.';
COMMENT ON COLUMN tenants.priority IS 'Scheduling weight for the tenant''s work; higher runs first when slots are scarce.';

CREATE TABLE api_keys (
    key_id     uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id  uuid        NOT NULL REFERENCES tenants (tenant_id),
    key_hash   bytea       NOT NULL UNIQUE CHECK (octet_length(key_hash) = 32),
    role       text        NOT NULL DEFAULT 'tenant' CHECK (role IN ('tenant', 'admin')),
    created_at timestamptz NOT NULL DEFAULT now(),
    revoked_at timestamptz
);

COMMENT ON TABLE api_keys IS
    'API keys by SHA-256 hash only: the key itself is shown once at creation and never stored, so a database leak leaks no credentials. '
    'A request is authenticated by hashing its bearer key and looking the hash up.';
COMMENT ON COLUMN api_keys.role IS 'tenant: the tenant''s own API. admin: quarantine and replay endpoints (an admin key belongs to the operator''s own tenant).';
COMMENT ON COLUMN api_keys.revoked_at IS 'Set to revoke; the row stays for audit.';

CREATE INDEX api_keys_tenant_id_idx ON api_keys (tenant_id);

-- generation_tasks -----------------------------------------------------------

CREATE TABLE generation_tasks (
    task_id                uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id              uuid        NOT NULL REFERENCES tenants (tenant_id),
    client_idempotency_key text        NOT NULL CHECK (client_idempotency_key <> ''),
    request_hash           bytea       NOT NULL CHECK (octet_length(request_hash) = 32),
    model                  text        NOT NULL CHECK (model <> ''),
    prompt                 text        NOT NULL,
    duration_seconds       integer     NOT NULL CHECK (duration_seconds > 0),
    resolution             text        NOT NULL CHECK (resolution <> ''),
    input_asset_ids        uuid[]      NOT NULL DEFAULT '{}',
    priority               integer     NOT NULL DEFAULT 0,
    status                 text        NOT NULL DEFAULT 'QUEUED' CHECK (status IN (
                               'QUEUED', 'SUBMITTING', 'WAITING_RETRY', 'RECONCILING', 'PROVIDER_RUNNING',
                               'FETCHING', 'MEDIA_PROCESSING', 'SUCCEEDED', 'FAILED', 'CANCELED',
                               'CANCELED_WITH_OUTPUT', 'CANCEL_RECONCILING', 'NEEDS_ATTENTION')),
    version                bigint      NOT NULL DEFAULT 1 CHECK (version >= 1),
    next_retry_at          timestamptz,
    next_poll_at           timestamptz,
    deadline_at            timestamptz,
    cancel_requested       boolean     NOT NULL DEFAULT false,
    progress               integer     NOT NULL DEFAULT 0 CHECK (progress BETWEEN 0 AND 100),
    error_code             text,
    error_message          text,
    provider               text,
    provider_job_id        text,
    created_at             timestamptz NOT NULL DEFAULT now(),
    updated_at             timestamptz NOT NULL DEFAULT now(),

    -- The same Idempotency-Key from the same tenant is the same task: a
    -- retried POST finds this row instead of generating (and paying) twice.
    CONSTRAINT generation_tasks_tenant_idempotency_key UNIQUE (tenant_id, client_idempotency_key),
    CONSTRAINT generation_tasks_provider_job CHECK (provider_job_id IS NULL OR provider IS NOT NULL)
);

COMMENT ON TABLE generation_tasks IS
    'One row per video generation request: the source of truth for its state. '
    'Every transition is a compare-and-set on version (UPDATE ... WHERE status IN (...) AND version = $n, setting version = version + 1) '
    'that appends a task_events row and writes its outbox events in the same transaction; zero rows updated means stale, re-read and decide.';
COMMENT ON COLUMN generation_tasks.request_hash IS 'SHA-256 of the canonical request body: the same Idempotency-Key with a different body is refused, not merged.';
COMMENT ON COLUMN generation_tasks.status IS 'State machine of docs/design.md §5. Terminal: SUCCEEDED, FAILED, CANCELED, CANCELED_WITH_OUTPUT, NEEDS_ATTENTION.';
COMMENT ON COLUMN generation_tasks.version IS 'Optimistic-concurrency counter, incremented by every transition; events carry it so late ones become stale no-ops.';
COMMENT ON COLUMN generation_tasks.next_retry_at IS 'When a WAITING_RETRY task is due for resubmission; the scanner''s safety net behind the delayed message.';
COMMENT ON COLUMN generation_tasks.provider_job_id IS 'Remote job of the current attempt; task_attempts keeps every attempt''s job.';

-- Scanners (retry safety net, reconciliation) look for tasks in one state
-- that are due.
CREATE INDEX generation_tasks_status_next_retry_at_idx ON generation_tasks (status, next_retry_at);

-- task_attempts --------------------------------------------------------------

CREATE TABLE task_attempts (
    attempt_id               uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    task_id                  uuid        NOT NULL REFERENCES generation_tasks (task_id),
    attempt_no               integer     NOT NULL CHECK (attempt_no >= 1),
    provider                 text        NOT NULL CHECK (provider <> ''),
    model                    text        NOT NULL CHECK (model <> ''),
    provider_idempotency_key text        NOT NULL UNIQUE CHECK (provider_idempotency_key <> ''),
    client_request_id        text        NOT NULL CHECK (client_request_id <> ''),
    provider_job_id          text,
    status                   text        NOT NULL DEFAULT 'SUBMITTING' CHECK (status IN (
                                 'SUBMITTING', 'ACCEPTED', 'SUBMIT_UNKNOWN', 'REJECTED', 'FAILED', 'SUCCEEDED', 'CANCELED')),
    error_code               text,
    error_message            text,
    request_started_at       timestamptz,
    response_at              timestamptz,
    created_at               timestamptz NOT NULL DEFAULT now(),
    updated_at               timestamptz NOT NULL DEFAULT now(),

    CONSTRAINT task_attempts_task_attempt_no UNIQUE (task_id, attempt_no)
);

COMMENT ON TABLE task_attempts IS
    'Every submission of a task to a provider, persisted and committed before the provider is called. '
    'If the response is lost the attempt stays SUBMIT_UNKNOWN and reconciliation asks the provider by client_request_id, '
    'so an unknown outcome never turns into a second paid generation.';
COMMENT ON COLUMN task_attempts.provider_idempotency_key IS 'Sent to the provider; globally unique so two attempts can never share a remote job by accident.';
COMMENT ON COLUMN task_attempts.client_request_id IS 'Our id for the request, used to find the remote job when the submit response was lost.';

-- Provider callbacks and polls name the remote job: find its attempt, and
-- refuse a second attempt claiming the same job.
CREATE UNIQUE INDEX task_attempts_provider_job_key
    ON task_attempts (provider, provider_job_id)
    WHERE provider_job_id IS NOT NULL;

-- task_events ----------------------------------------------------------------

CREATE TABLE task_events (
    event_seq   bigserial   PRIMARY KEY,
    task_id     uuid        NOT NULL REFERENCES generation_tasks (task_id),
    from_status text        CHECK (from_status IN (
                    'QUEUED', 'SUBMITTING', 'WAITING_RETRY', 'RECONCILING', 'PROVIDER_RUNNING',
                    'FETCHING', 'MEDIA_PROCESSING', 'SUCCEEDED', 'FAILED', 'CANCELED',
                    'CANCELED_WITH_OUTPUT', 'CANCEL_RECONCILING', 'NEEDS_ATTENTION')),
    to_status   text        NOT NULL CHECK (to_status IN (
                    'QUEUED', 'SUBMITTING', 'WAITING_RETRY', 'RECONCILING', 'PROVIDER_RUNNING',
                    'FETCHING', 'MEDIA_PROCESSING', 'SUCCEEDED', 'FAILED', 'CANCELED',
                    'CANCELED_WITH_OUTPUT', 'CANCEL_RECONCILING', 'NEEDS_ATTENTION')),
    version     bigint      NOT NULL CHECK (version >= 1),
    reason      text,
    event_id    uuid,
    created_at  timestamptz NOT NULL DEFAULT now(),

    -- Each transition produces exactly one new version, so a second row for
    -- the same version is a transition applied twice. Also the index the
    -- timeline is read through.
    CONSTRAINT task_events_task_version UNIQUE (task_id, version)
);

COMMENT ON TABLE task_events IS
    'Append-only timeline of a task''s transitions, written in the transaction of the transition itself. '
    'UPDATE and DELETE are refused by trigger: history that can be edited cannot settle a dispute.';
COMMENT ON COLUMN task_events.from_status IS 'NULL for the row that records the task''s creation.';
COMMENT ON COLUMN task_events.version IS 'The task''s version after the transition.';
COMMENT ON COLUMN task_events.event_id IS 'Event that caused the transition, when one did (NULL for API calls and scanners).';

CREATE FUNCTION reject_row_change() RETURNS trigger
    LANGUAGE plpgsql AS
$$
BEGIN
    RAISE EXCEPTION '% is append-only: % refused', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'restrict_violation';
END
$$;

COMMENT ON FUNCTION reject_row_change() IS 'Trigger function that makes a table append-only by refusing UPDATE and DELETE.';

CREATE TRIGGER task_events_append_only
    BEFORE UPDATE OR DELETE ON task_events
    FOR EACH ROW
    EXECUTE FUNCTION reject_row_change();

-- assets ---------------------------------------------------------------------

CREATE TABLE assets (
    asset_id        uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id       uuid        NOT NULL REFERENCES tenants (tenant_id),
    task_id         uuid        REFERENCES generation_tasks (task_id),
    source_asset_id uuid        REFERENCES assets (asset_id),
    kind            text        NOT NULL CHECK (kind IN ('SOURCE', 'PROXY', 'THUMBNAIL', 'WAVEFORM', 'RENDER')),
    object_key      text        NOT NULL UNIQUE CHECK (object_key <> ''),
    checksum_sha256 bytea       NOT NULL CHECK (octet_length(checksum_sha256) = 32),
    size_bytes      bigint      NOT NULL CHECK (size_bytes >= 0),
    content_type    text        NOT NULL CHECK (content_type <> ''),
    duration_ms     bigint      CHECK (duration_ms >= 0),
    width           integer     CHECK (width > 0),
    height          integer     CHECK (height > 0),
    video_codec     text,
    audio_codec     text,
    bitrate         bigint      CHECK (bitrate >= 0),
    probe           jsonb,
    created_at      timestamptz NOT NULL DEFAULT now(),

    -- Derived media (proxy, thumbnail, waveform) always names the asset it
    -- was made from; originals (uploads, provider outputs) and renders do not.
    CONSTRAINT assets_derived_has_source CHECK (
        (kind IN ('PROXY', 'THUMBNAIL', 'WAVEFORM')) = (source_asset_id IS NOT NULL)),
    -- One derivative of each kind per source asset: a redelivered
    -- postprocess message finds the existing row instead of adding another.
    -- Keyed on the source asset rather than the task, because uploads are
    -- postprocessed too and have no task.
    CONSTRAINT assets_source_kind UNIQUE (source_asset_id, kind)
);

COMMENT ON TABLE assets IS
    'Media stored in object storage (the bytes live there, never here): uploads, provider outputs, their derivatives and final renders. '
    'object_key is deterministic and unique, so writing the same asset twice is detected rather than duplicated.';
COMMENT ON COLUMN assets.task_id IS 'Generation task that produced the asset (or whose output it derives from); NULL for uploads and renders.';
COMMENT ON COLUMN assets.source_asset_id IS 'Asset this one was derived from; set exactly for PROXY, THUMBNAIL and WAVEFORM.';
COMMENT ON COLUMN assets.probe IS 'Full ffprobe output; the typed columns hold what queries need.';

-- A generation task yields one output video: the fetch stage's insert is
-- idempotent even if the object key were not.
CREATE UNIQUE INDEX assets_task_output_key ON assets (task_id) WHERE kind = 'SOURCE' AND task_id IS NOT NULL;
CREATE INDEX assets_task_id_idx ON assets (task_id) WHERE task_id IS NOT NULL;
CREATE INDEX assets_tenant_created_idx ON assets (tenant_id, created_at);

-- render_jobs ----------------------------------------------------------------

CREATE TABLE render_jobs (
    render_job_id       uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id           uuid        NOT NULL REFERENCES tenants (tenant_id),
    project_revision_id text        NOT NULL CHECK (project_revision_id <> ''),
    render_spec_id      text        NOT NULL CHECK (render_spec_id <> ''),
    status              text        NOT NULL DEFAULT 'QUEUED' CHECK (status IN ('QUEUED', 'RENDERING', 'SUCCEEDED', 'FAILED', 'CANCELED')),
    version             bigint      NOT NULL DEFAULT 1 CHECK (version >= 1),
    output_asset_id     uuid        REFERENCES assets (asset_id),
    error_code          text,
    error_message       text,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    started_at          timestamptz,
    finished_at         timestamptz,

    -- Rendering the same revision with the same spec twice is the same job:
    -- a repeated POST /v1/renders returns it instead of rendering again.
    CONSTRAINT render_jobs_tenant_revision_spec UNIQUE (tenant_id, project_revision_id, render_spec_id),
    CONSTRAINT render_jobs_succeeded_has_output CHECK (status <> 'SUCCEEDED' OR output_asset_id IS NOT NULL)
);

COMMENT ON TABLE render_jobs IS
    'Final renders of a project revision with a render spec. Versioned transitions like generation_tasks; '
    'the output is an assets row of kind RENDER.';
COMMENT ON COLUMN render_jobs.project_revision_id IS 'Immutable revision of the edit being rendered (owned by the editor, not this database).';
