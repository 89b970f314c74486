UPDATE task_attempts SET status = 'REJECTED' WHERE status = 'ABANDONED';
ALTER TABLE task_attempts
    DROP CONSTRAINT task_attempts_status_check,
    ADD CONSTRAINT task_attempts_status_check CHECK (status IN (
        'SUBMITTING', 'ACCEPTED', 'SUBMIT_UNKNOWN', 'REJECTED', 'FAILED', 'SUCCEEDED', 'CANCELED')),
    DROP CONSTRAINT task_attempts_refused_within_sends,
    DROP COLUMN refused_sends,
    DROP COLUMN sends;
