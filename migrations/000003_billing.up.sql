-- Credits: per-tenant accounts, one reservation per generation task, and an
-- append-only ledger keyed by the business fact it records. See docs/design.md §4.
--
-- This file runs as one implicit transaction.

CREATE TABLE credit_accounts (
    tenant_id  uuid        PRIMARY KEY REFERENCES tenants (tenant_id),
    balance    bigint      NOT NULL DEFAULT 0 CHECK (balance >= 0),
    reserved   bigint      NOT NULL DEFAULT 0 CHECK (reserved >= 0),
    version    bigint      NOT NULL DEFAULT 1 CHECK (version >= 1),
    updated_at timestamptz NOT NULL DEFAULT now()
);

COMMENT ON TABLE credit_accounts IS
    'A tenant''s credits, in the smallest billing unit (integers only: no rounding drift). '
    'The CHECKs are the last line against overspending: a reservation or capture that would go negative fails instead of committing.';
COMMENT ON COLUMN credit_accounts.reserved IS 'Credits held by HELD reservations for work not yet settled.';
COMMENT ON COLUMN credit_accounts.version IS 'Optimistic-concurrency counter, incremented by every change.';

CREATE TABLE credit_reservations (
    reservation_id uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    task_id        uuid        NOT NULL UNIQUE REFERENCES generation_tasks (task_id),
    tenant_id      uuid        NOT NULL REFERENCES credit_accounts (tenant_id),
    amount         bigint      NOT NULL CHECK (amount > 0),
    status         text        NOT NULL DEFAULT 'HELD' CHECK (status IN ('HELD', 'CAPTURED', 'RELEASED')),
    created_at     timestamptz NOT NULL DEFAULT now(),
    settled_at     timestamptz,

    -- Settled exactly when it left HELD: captured or released once, with a time.
    CONSTRAINT credit_reservations_settled_at CHECK ((status = 'HELD') = (settled_at IS NULL))
);

COMMENT ON TABLE credit_reservations IS
    'Credits held for one generation task from acceptance until it settles: CAPTURED when output was delivered, RELEASED on failure or cancel. '
    'UNIQUE(task_id): a task holds at most one reservation, however often its submit event is redelivered.';

-- Reconciliation finds holds that outlived their task.
CREATE INDEX credit_reservations_held_idx ON credit_reservations (created_at) WHERE status = 'HELD';
CREATE INDEX credit_reservations_tenant_id_idx ON credit_reservations (tenant_id);

CREATE TABLE credit_ledger (
    entry_id             uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id            uuid        NOT NULL REFERENCES credit_accounts (tenant_id),
    ledger_business_type text        NOT NULL CHECK (ledger_business_type <> ''),
    business_id          text        NOT NULL CHECK (business_id <> ''),
    amount               bigint      NOT NULL CHECK (amount <> 0),
    balance_after        bigint      NOT NULL CHECK (balance_after >= 0),
    created_at           timestamptz NOT NULL DEFAULT now(),

    -- One entry per business fact (for example CAPTURE of reservation X):
    -- a settle event delivered twice hits this key instead of charging twice.
    CONSTRAINT credit_ledger_business_key UNIQUE (ledger_business_type, business_id)
);

COMMENT ON TABLE credit_ledger IS
    'Append-only record of every change to a balance, in the transaction that changes it. '
    'UPDATE and DELETE are refused by trigger; corrections are new entries.';
COMMENT ON COLUMN credit_ledger.ledger_business_type IS 'What kind of fact the entry records (for example TOP_UP, CAPTURE, REFUND); with business_id, its idempotency key.';
COMMENT ON COLUMN credit_ledger.amount IS 'Signed change to the balance: positive credits the tenant, negative debits.';

CREATE INDEX credit_ledger_tenant_created_idx ON credit_ledger (tenant_id, created_at);

CREATE TRIGGER credit_ledger_append_only
    BEFORE UPDATE OR DELETE ON credit_ledger
    FOR EACH ROW
    EXECUTE FUNCTION reject_row_change();
