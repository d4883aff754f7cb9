-- DEMO FIXTURE: the host sessions the frames in testdata/frames/ belong to,
-- so `schemastate demo` followed by `schemastate ingest
-- testdata/frames/stream.ndjson` records every valid frame (the foreign key
-- to task_sessions holds). Valid on SQLite and PostgreSQL alike.
INSERT INTO task_sessions (id, task_id) VALUES ('sess-claude', 'task-review');
INSERT INTO task_sessions (id, task_id) VALUES ('sess-opencode', 'task-refactor');
