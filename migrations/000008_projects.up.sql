-- Projects and their immutable timeline revisions (seed 7.8.4: the render
-- API fixes project_revision_id and render_spec_id). A revision keeps what
-- the client posted (the shorthand or OpenTimelineIO JSON) and the render
-- spec it lowered to; the spec's sha256 identifies the content, so posting
-- the same timeline again finds the same revision.

CREATE TABLE projects (
    project_id uuid        PRIMARY KEY,
    tenant_id  uuid        NOT NULL REFERENCES tenants (tenant_id),
    name       text        NOT NULL CHECK (name <> '' AND length(name) <= 200),
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX projects_tenant_idx ON projects (tenant_id, created_at);

CREATE TABLE project_revisions (
    revision_id    uuid        PRIMARY KEY,
    project_id     uuid        NOT NULL REFERENCES projects (project_id),
    tenant_id      uuid        NOT NULL REFERENCES tenants (tenant_id),
    content_sha256 bytea       NOT NULL CHECK (octet_length(content_sha256) = 32),
    format         text        NOT NULL CHECK (format IN ('timeline', 'otio')),
    source         jsonb       NOT NULL,
    spec           jsonb       NOT NULL,
    duration_us    bigint      NOT NULL CHECK (duration_us > 0),
    created_at     timestamptz NOT NULL DEFAULT now(),

    CONSTRAINT project_revisions_content UNIQUE (project_id, content_sha256)
);

COMMENT ON TABLE project_revisions IS
    'Immutable timeline revisions: rows are inserted, never updated; renders name them by revision_id.';
