DROP TABLE task_resolutions;
