-- The optional content review of a task's output (seed 7.8.3; docs/journey.md,
-- "Content review"). A row exists exactly when review was required for the
-- task: the probe writes it in the transaction that emits the REVIEW step,
-- so a config change mid-flight can neither strand a task (waiting on a
-- review nobody asked for) nor skip one (finishing without the review it
-- was promised). The derivative or review step that completes the task
-- reads it under the task's row lock.
CREATE TABLE task_reviews (
    task_id         uuid PRIMARY KEY REFERENCES generation_tasks (task_id) ON DELETE CASCADE,
    tenant_id       uuid NOT NULL,
    asset_id        uuid NOT NULL,
    -- PENDING: asked, no answer yet; WAITING: the reviewer was unavailable,
    -- a delayed REVIEW is scheduled for next_attempt_at; APPROVED and
    -- REJECTED: the reviewer decided; UNAVAILABLE: the reviewer stayed
    -- unavailable past REVIEW_MAX_WAIT and the task went to NEEDS_ATTENTION.
    status          text NOT NULL DEFAULT 'PENDING'
        CHECK (status IN ('PENDING', 'WAITING', 'APPROVED', 'REJECTED', 'UNAVAILABLE')),
    decision        text CHECK (decision IN ('approve', 'reject')),
    reason_code     text,
    labels          text[] NOT NULL DEFAULT '{}',
    reviewer        text,
    -- attempts counts the calls whose outcome was recorded; a REVIEW event
    -- carries the count it expects, so a duplicate or superseded one is a
    -- no-op.
    attempts        integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    -- malformed counts the answers that were not a decision (treated as
    -- the reviewer being unavailable).
    malformed       integer NOT NULL DEFAULT 0 CHECK (malformed >= 0),
    last_error      text,
    requested_at    timestamptz NOT NULL DEFAULT now(),
    -- waiting_since: when the reviewer was first found unavailable; the
    -- wait's maximum counts from it.
    waiting_since   timestamptz,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    decided_at      timestamptz,
    updated_at      timestamptz NOT NULL DEFAULT now(),
    CHECK ((status IN ('APPROVED', 'REJECTED')) = (decision IS NOT NULL AND decided_at IS NOT NULL))
);

-- The reconcile scanner looks for undecided reviews whose next step is
-- overdue (a delayed REVIEW lost with a broker).
CREATE INDEX task_reviews_open_idx ON task_reviews (next_attempt_at) WHERE status IN ('PENDING', 'WAITING');
