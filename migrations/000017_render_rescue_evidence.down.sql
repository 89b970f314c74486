ALTER TABLE render_jobs
    DROP COLUMN rescue_asks,
    DROP COLUMN rescue_events,
    DROP COLUMN rescued_at;
