ALTER TABLE generation_tasks DROP COLUMN progress_updated_at;
