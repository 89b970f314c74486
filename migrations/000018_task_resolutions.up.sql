-- A person's decision on a task the pipeline handed over in NEEDS_ATTENTION
-- because a submit's outcome stayed unknown (a provider with no lookup, or
-- lookups that never answered): adapter tasks resolve. Each decision is
-- kept with who made it and under which ticket.
CREATE TABLE task_resolutions (
    resolution_id   uuid        PRIMARY KEY,
    task_id         uuid        NOT NULL REFERENCES generation_tasks (task_id),
    attempt_id      uuid        NOT NULL REFERENCES task_attempts (attempt_id),
    decision        text        NOT NULL CHECK (decision IN ('JOB', 'NO_JOB')),
    provider_job_id text,
    ticket          text        NOT NULL CHECK (ticket <> ''),
    operator        text        NOT NULL CHECK (operator <> ''),
    reason          text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    CHECK ((decision = 'JOB') = (provider_job_id IS NOT NULL))
);

CREATE INDEX task_resolutions_task ON task_resolutions (task_id);

COMMENT ON TABLE task_resolutions IS 'Decisions of a person on a task in NEEDS_ATTENTION reconcile.submit_unknown: the job found at the provider (JOB), or none (NO_JOB, resubmitted with the same key).';
