DROP TABLE project_revisions;
DROP TABLE projects;
