-- HOST FIXTURE: task_session_subagents as a host creates it with its own DDL
-- once it has the amendment (installed-base state 6 reached without this
-- module): agent_execution_id present, the three-column key as an inline
-- UNIQUE table constraint (auto-named on PostgreSQL, an autoindex on SQLite),
-- the metrics as INTEGER, and one row. The same text on both dialects.
CREATE TABLE IF NOT EXISTS task_session_subagents (
    id TEXT PRIMARY KEY,
    task_session_id TEXT NOT NULL,
    task_id TEXT NOT NULL,
    turn_id TEXT,
    agent_execution_id TEXT NOT NULL DEFAULT 'unknown',
    tool_call_id TEXT NOT NULL,
    parent_tool_call_id TEXT,
    subagent_type TEXT,
    description TEXT,
    agent_id TEXT,
    child_session_id TEXT,
    model TEXT,
    agent_status TEXT,
    tool_status TEXT,
    is_async INTEGER NOT NULL DEFAULT 0,
    total_tokens INTEGER,
    tool_use_count INTEGER,
    duration_ms INTEGER,
    source TEXT NOT NULL DEFAULT 'live',
    observed_at TIMESTAMP NOT NULL,
    settled_at TIMESTAMP,
    updated_at TIMESTAMP NOT NULL,
    FOREIGN KEY (task_session_id) REFERENCES task_sessions(id) ON DELETE CASCADE,
    UNIQUE (task_session_id, agent_execution_id, tool_call_id)
);
CREATE INDEX IF NOT EXISTS idx_subagents_session_id ON task_session_subagents(task_session_id);
CREATE INDEX IF NOT EXISTS idx_subagents_task_id ON task_session_subagents(task_id);
CREATE INDEX IF NOT EXISTS idx_subagents_turn_id ON task_session_subagents(turn_id);
INSERT INTO task_sessions (id, task_id) VALUES ('host-session-1', 'host-task-1');
INSERT INTO task_session_subagents (id, task_session_id, task_id, agent_execution_id, tool_call_id, observed_at, updated_at) VALUES ('host-row-1', 'host-session-1', 'host-task-1', '6f1c2a9e-0000-4000-8000-000000000001', 'toolu_1', '2026-08-01 00:00:00.5+00:00', '2026-08-01 00:00:00.5+00:00');
