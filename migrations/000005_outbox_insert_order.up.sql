-- outbox_events.created_at orders a FIFO message group for the relay. Its
-- default was now(), the time the *transaction* started, which is not the
-- order events become visible: a transaction that began first but waited
-- on a task's row lock inserts its event after the one it waited for, yet
-- carried an earlier created_at, so the relay published it first and a
-- task's state changes could reach subscribers out of order.
--
-- clock_timestamp() is the time of the insert itself. Transitions of one
-- task are serialised by its row lock and insert their events after taking
-- it, so a later transition's row always gets a later created_at.
ALTER TABLE outbox_events ALTER COLUMN created_at SET DEFAULT clock_timestamp();

COMMENT ON COLUMN outbox_events.created_at IS
    'Insert time (clock_timestamp(), not the transaction start): the relay publishes a FIFO message group in this order.';
