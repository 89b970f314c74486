-- Pauses of new work (package waitlist, 7.14.3): an operator pauses a
-- provider, a model or a tenant under a ticket; submits that would start
-- work there wait on the wait list with the reason "paused" instead, and
-- resuming wakes them in their order. Jobs already running go on. A row
-- is the audit of one pause: who paused and resumed, when and why.
CREATE TABLE scheduling_pauses (
    pause_id        bigserial   PRIMARY KEY,
    scope           text        NOT NULL CHECK (scope ~ '^(provider|model|tenant):.+'),
    ticket          text        NOT NULL CHECK (ticket <> ''),
    operator        text        NOT NULL CHECK (operator <> ''),
    reason          text        NOT NULL CHECK (reason <> ''),
    paused_at       timestamptz NOT NULL DEFAULT now(),
    resumed_at      timestamptz,
    resume_ticket   text,
    resume_operator text,
    resume_reason   text,
    CHECK ((resumed_at IS NULL) = (resume_operator IS NULL))
);

-- A scope is paused once at a time.
CREATE UNIQUE INDEX scheduling_pauses_active_idx ON scheduling_pauses (scope) WHERE resumed_at IS NULL;
