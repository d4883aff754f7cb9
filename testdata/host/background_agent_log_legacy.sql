-- HOST FIXTURE: background_agent_log as the host deployed it before transcripts
-- existed (no transcript_path, no transcript_status). Tests create it, insert
-- rows, and reconcile: the two columns must arrive by ALTER TABLE, without a
-- rebuild and without touching a row.
CREATE TABLE IF NOT EXISTS background_agent_log (
    workspace_path TEXT NOT NULL,
    session_id TEXT NOT NULL,
    agent_id TEXT NOT NULL,
    execution_id TEXT,
    kind TEXT NOT NULL,
    provider TEXT,
    model TEXT,
    status TEXT NOT NULL,
    started_at TIMESTAMP NOT NULL,
    completed_at TIMESTAMP,
    error TEXT,
    PRIMARY KEY (workspace_path, session_id, agent_id)
);
CREATE INDEX IF NOT EXISTS idx_background_agent_log_session_id ON background_agent_log(session_id);
