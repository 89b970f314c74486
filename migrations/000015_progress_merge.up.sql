-- Live progress stays in Redis and is merged into generation_tasks.progress
-- by step or interval (seed 7.8.2, shared/progress). progress_updated_at is
-- when it was last merged: the interval rule reads it from the row, so it
-- holds across processes and after Redis lost its data. A merge is not a
-- transition: it bumps no version and leaves updated_at alone.
ALTER TABLE generation_tasks ADD COLUMN progress_updated_at timestamptz;
