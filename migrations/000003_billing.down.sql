DROP TRIGGER credit_ledger_append_only ON credit_ledger;
DROP TABLE credit_ledger;
DROP TABLE credit_reservations;
DROP TABLE credit_accounts;
