-- Thumbnail and waveform are nice to have; the proxy is required. A task
-- whose thumbnail or waveform cannot be made (ffmpeg keeps failing on its
-- output) still SUCCEEDS, with the missing kinds listed here, and the
-- reconciler retries them in the background. derivative_failures counts the
-- failures that decide when to stop waiting, and when to stop retrying.

ALTER TABLE generation_tasks ADD COLUMN missing_derivatives text[] NOT NULL DEFAULT '{}';

COMMENT ON COLUMN generation_tasks.missing_derivatives IS
    'Optional derivatives (THUMBNAIL, WAVEFORM) the task finished without; retried in the background and removed once made.';

CREATE TABLE derivative_failures (
    source_asset_id uuid        NOT NULL REFERENCES assets (asset_id),
    kind            text        NOT NULL CHECK (kind IN ('PROXY', 'THUMBNAIL', 'WAVEFORM')),
    failures        integer     NOT NULL DEFAULT 0 CHECK (failures >= 0),
    last_error      text,
    updated_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (source_asset_id, kind)
);

COMMENT ON TABLE derivative_failures IS
    'How often making one derivative of one asset failed in ffmpeg, and how: after a few failures an optional derivative stops holding its task back.';
