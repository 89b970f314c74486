-- A render is failed render.stuck only on evidence that its re-asked steps
-- reached the render stage and changed nothing: the reconciler records
-- which events it re-asked and when, and counts a re-ask (rescues) only
-- once the render stage's inbox holds those events, or a chunk was claimed
-- after them. Re-asks the broker could not deliver (consumers deaf after a
-- proxy restart, the broker down) are not counted; they are spaced out by
-- rescue_asks, every re-ask since the last progress.
ALTER TABLE render_jobs
    ADD COLUMN rescued_at    timestamptz,
    ADD COLUMN rescue_events uuid[] NOT NULL DEFAULT '{}',
    ADD COLUMN rescue_asks   integer NOT NULL DEFAULT 0 CHECK (rescue_asks >= 0);

COMMENT ON COLUMN render_jobs.rescued_at IS 'When the reconciler last re-asked a step of this render.';
COMMENT ON COLUMN render_jobs.rescue_events IS 'The events of that re-ask: handled once the render stage''s inbox holds them.';
COMMENT ON COLUMN render_jobs.rescue_asks IS 'Re-asks since the last progress, delivered or not: each waits twice as long as the one before (capped).';
COMMENT ON COLUMN render_jobs.rescues IS 'Re-asks since the last progress that the render stage handled without progress: bounded, then (past the give-up horizon) the render FAILS render.stuck.';
