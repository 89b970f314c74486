-- The wait list of the concurrency slots (package waitlist): a submit that
-- finds a slot scope full waits here instead of guessing a backoff, and a
-- released slot is handed to the best waiter of its scopes at once. Redis
-- holds the slots; the waiting lives here, so a Redis restart loses none of
-- it.
--
-- A task has one row while it waits. rank_ms orders the waiters of a scope,
-- lowest first: the tenant's fair tag (advanced at each join by the grant
-- interval its priority gets, so a tenant's burst queues behind itself) less a
-- head start for the tenant's priority, capped so that a task waiting long
-- enough passes newer work of any priority. woken_at is set when the
-- task was handed its slots and woken; the row goes when the task enters
-- SUBMITTING, and returns to the list with its rank if the woken submit
-- found a slot taken after all.
CREATE TABLE slot_waits (
    task_id     uuid        PRIMARY KEY REFERENCES generation_tasks (task_id) ON DELETE CASCADE,
    tenant_id   uuid        NOT NULL,
    scope       text        NOT NULL CHECK (scope <> ''),
    provider    text        NOT NULL CHECK (provider <> ''),
    priority    integer     NOT NULL,
    rank_ms     bigint      NOT NULL,
    reason      text        NOT NULL,
    joined_at   timestamptz NOT NULL DEFAULT now(),
    refusals    integer     NOT NULL DEFAULT 0,
    woken_at    timestamptz
);

-- The next waiter of a scope, and the count of those ahead of one.
CREATE INDEX slot_waits_next_idx ON slot_waits (scope, rank_ms) WHERE woken_at IS NULL;

-- Per scope and priority: how often a waiter of that priority was handed
-- a slot (an average interval: the turnover its class gets under load),
-- for fair tags and the ETA a waiting task shows; and per tenant, its
-- latest fair tag.
CREATE TABLE slot_wait_scopes (
    scope             text        NOT NULL,
    priority          integer     NOT NULL,
    grant_interval_ms double precision NOT NULL CHECK (grant_interval_ms > 0),
    last_grant_at     timestamptz,
    PRIMARY KEY (scope, priority)
);

CREATE TABLE slot_wait_tags (
    scope      text   NOT NULL,
    tenant_id  uuid   NOT NULL,
    tag_ms     bigint NOT NULL,
    PRIMARY KEY (scope, tenant_id)
);

COMMENT ON COLUMN tenants.priority IS 'The tenant''s priority (0-100): it orders the tenant''s work waiting for provider slots (slot_waits.rank_ms), picks the intake class of API_TENANT_RATE, and tenants below API_SHED_BELOW_PRIORITY are slowed down and shed first when the outbox falls behind.';
COMMENT ON COLUMN generation_tasks.priority IS 'The priority a request asked for (0-10), kept on the task; it orders nothing: the wait list orders by the tenant''s priority, so a tenant cannot move its own work ahead of others.';
