DROP TABLE scheduling_pauses;
