-- Failover to another provider is safe only for an attempt known to have
-- created no remote job. The attempt counts the submits it sent and how many
-- of them the provider refused outright (429, 503, a circuit that never
-- let the call out); every send refused, or a lookup that confirmed the job
-- absent, means no job exists under its key. ABANDONED is such an attempt
-- left for a new attempt at another provider.
ALTER TABLE task_attempts
    ADD COLUMN sends         integer NOT NULL DEFAULT 0 CHECK (sends >= 0),
    ADD COLUMN refused_sends integer NOT NULL DEFAULT 0 CHECK (refused_sends >= 0),
    ADD CONSTRAINT task_attempts_refused_within_sends CHECK (refused_sends <= sends),
    DROP CONSTRAINT task_attempts_status_check,
    ADD CONSTRAINT task_attempts_status_check CHECK (status IN (
        'SUBMITTING', 'ACCEPTED', 'SUBMIT_UNKNOWN', 'REJECTED', 'FAILED', 'SUCCEEDED', 'CANCELED', 'ABANDONED'));

-- An attempt from before this migration may have sent its submit: count one
-- send, never refused, so it can only go on at its own provider.
UPDATE task_attempts SET sends = 1 WHERE status IN ('SUBMITTING', 'SUBMIT_UNKNOWN');

COMMENT ON COLUMN task_attempts.sends IS 'Submits sent under this attempt''s key, counted before each call.';
COMMENT ON COLUMN task_attempts.refused_sends IS
    'Of those, how many the provider refused before creating anything (or a lookup confirmed absent): equal to sends means no remote job exists, so the task may fail over to another provider.';
