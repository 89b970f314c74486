DROP TABLE IF EXISTS task_reviews;
