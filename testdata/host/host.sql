-- HOST FIXTURE: minimal shapes of the host backend's own tables, as they exist
-- in the field (host-context.md). Not part of the declared shape: schemastate
-- never creates, inspects or alters these tables.
CREATE TABLE IF NOT EXISTS task_sessions (
    id TEXT PRIMARY KEY,
    task_id TEXT NOT NULL,
    state TEXT NOT NULL DEFAULT 'CREATED',
    created_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP,
    updated_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP
);
CREATE TABLE IF NOT EXISTS task_session_turns (
    id TEXT PRIMARY KEY,
    task_session_id TEXT NOT NULL,
    task_id TEXT NOT NULL,
    started_at TIMESTAMP NOT NULL,
    completed_at TIMESTAMP,
    metadata TEXT DEFAULT '{}',
    created_at TIMESTAMP NOT NULL,
    updated_at TIMESTAMP NOT NULL,
    FOREIGN KEY (task_session_id) REFERENCES task_sessions(id) ON DELETE CASCADE
);
CREATE TABLE IF NOT EXISTS task_session_messages (
    id TEXT PRIMARY KEY,
    task_session_id TEXT NOT NULL,
    task_id TEXT DEFAULT '',
    turn_id TEXT NOT NULL,
    author_type TEXT NOT NULL DEFAULT 'agent',
    author_id TEXT,
    content TEXT NOT NULL,
    requests_input INTEGER DEFAULT 0,
    type TEXT NOT NULL DEFAULT 'message',
    metadata TEXT DEFAULT '{}',
    created_at TIMESTAMP NOT NULL,
    updated_at TIMESTAMP NOT NULL,
    FOREIGN KEY (task_session_id) REFERENCES task_sessions(id) ON DELETE CASCADE
);
CREATE INDEX IF NOT EXISTS idx_messages_session_id ON task_session_messages(task_session_id);
CREATE INDEX IF NOT EXISTS idx_messages_created_at ON task_session_messages(created_at);
CREATE INDEX IF NOT EXISTS idx_messages_session_created ON task_session_messages(task_session_id, created_at);
CREATE INDEX IF NOT EXISTS idx_messages_turn_id ON task_session_messages(turn_id);
CREATE TABLE IF NOT EXISTS kandev_meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL DEFAULT ''
);
