-- Every repair the reconciler makes leaves one row here, in the
-- transaction of the repair where there is one: a lost step re-emitted
-- (a rescue), a task handed to a person, a settle asked again, an optional
-- derivative retried, a concurrency-slot scope rebuilt, an upload or a
-- render rescued, settled again, expired or failed. An operator asks this
-- table what the reconciler did to an aggregate and why, instead of
-- searching logs.
--
-- The rescue column is where rescues are counted: a task's rounds without
-- progress are its rescue rows since the last task_events row that is not
-- a rescue (task_version names the timeline row of each), not the text of
-- a timeline reason.
CREATE TABLE reconcile_repairs (
    repair_id      bigserial   PRIMARY KEY,
    repair         text        NOT NULL CHECK (repair <> ''),
    aggregate_type text        NOT NULL CHECK (aggregate_type <> ''),
    aggregate_id   text        NOT NULL CHECK (aggregate_id <> ''),
    reason         text        NOT NULL,
    rescue         boolean     NOT NULL DEFAULT false,
    task_version   bigint      CHECK (task_version >= 1),
    created_at     timestamptz NOT NULL DEFAULT now(),
    -- A task rescue is a versioned touch: it names the timeline row it wrote.
    CHECK (NOT rescue OR aggregate_type <> 'generation_task' OR task_version IS NOT NULL)
);

-- The scanner reads an aggregate's rescues on every rescue it considers.
CREATE INDEX reconcile_repairs_rescues_idx ON reconcile_repairs (aggregate_id, created_at) WHERE rescue;
-- What was done to an aggregate, newest first.
CREATE INDEX reconcile_repairs_aggregate_idx ON reconcile_repairs (aggregate_type, aggregate_id, created_at);

-- Rescues made before this table existed were recorded only by their
-- timeline reason: carry them over, so that no task's count starts again.
INSERT INTO reconcile_repairs (repair, aggregate_type, aggregate_id, reason, rescue, task_version, created_at)
SELECT 'task.rescue', 'generation_task', task_id::text, reason, true, version, created_at
FROM task_events WHERE reason LIKE 'reconcile: re-emitted %';

COMMENT ON TABLE reconcile_repairs IS 'Audit trail of the reconciler: one row per repair (what, which aggregate, why, when). Append-only by convention; nothing updates it.';
COMMENT ON COLUMN reconcile_repairs.repair IS 'What was done: task.rescue, task.give_up, task.resettle, task.derivative_retry, slots.rebuild, upload.expire, upload.rescue, upload.give_up, render.rescue, render.resettle, render.give_up.';
COMMENT ON COLUMN reconcile_repairs.rescue IS 'A re-emission of a lost step: the rows rescues are counted from.';
COMMENT ON COLUMN reconcile_repairs.task_version IS 'For a task rescue, the version of the task_events row its touch wrote.';
