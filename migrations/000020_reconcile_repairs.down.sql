DROP TABLE reconcile_repairs;
