DROP TABLE derivative_failures;

ALTER TABLE generation_tasks DROP COLUMN missing_derivatives;
