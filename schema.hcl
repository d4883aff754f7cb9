# schema.hcl — the declared shape of every table schemastate owns.
#
# One file serves SQLite and PostgreSQL: the reconciler evaluates it with
# var.dialect set to "sqlite" or "postgres", and the locals below pick the
# dialect's type names. Edit this file to change the shape; `schemastate plan`
# shows what a change would do before any boot applies it.
#
# Conventions the reconciler relies on (README, "Declared shape"):
#   * A table whose comment starts with "host:" is a host table declared only so
#     foreign keys can name it. It is never inspected, created or altered.
#   * A unique index is declared as `index { unique = true }`; on PostgreSQL the
#     reconciler turns it into a UNIQUE constraint of the same name.

variable "dialect" {
  type    = string
  default = "sqlite"
}

locals {
  pg        = var.dialect == "postgres"
  text      = sql("text")
  int       = sql("integer")
  int64     = local.pg ? sql("bigint") : sql("integer")
  timestamp = sql("timestamp")
}

schema "main" {}

table "task_sessions" {
  schema  = schema.main
  comment = "host: parent of task_session_subagents (FK target only)"
  column "id" {
    type = local.text
    null = false
  }
  primary_key {
    columns = [column.id]
  }
}

# One row per subagent invocation (spec: Data model). Keyed by the execution
# that emitted it (Amendment 1): tool_call_id is unique only within one
# execution.
table "task_session_subagents" {
  schema = schema.main
  column "id" {
    type = local.text
    null = false
  }
  column "task_session_id" {
    type = local.text
    null = false
  }
  column "task_id" {
    type = local.text
    null = false
  }
  column "turn_id" {
    type = local.text
    null = true
  }
  # AC-31: never NULL, never empty. Rows that predate the column receive the
  # shared 'unknown' sentinel; every writer supplies the value explicitly.
  column "agent_execution_id" {
    type    = local.text
    null    = false
    default = "unknown"
  }
  column "tool_call_id" {
    type = local.text
    null = false
  }
  column "parent_tool_call_id" {
    type = local.text
    null = true
  }
  column "subagent_type" {
    type = local.text
    null = true
  }
  column "description" {
    type = local.text
    null = true
  }
  column "agent_id" {
    type = local.text
    null = true
  }
  column "child_session_id" {
    type = local.text
    null = true
  }
  column "model" {
    type = local.text
    null = true
  }
  column "agent_status" {
    type = local.text
    null = true
  }
  column "tool_status" {
    type = local.text
    null = true
  }
  column "is_async" {
    type    = local.int
    null    = false
    default = 0
  }
  # AC-7: the three metrics are NULL when not reported. No DEFAULT, ever.
  column "total_tokens" {
    type = local.int64
    null = true
  }
  column "tool_use_count" {
    type = local.int64
    null = true
  }
  column "duration_ms" {
    type = local.int64
    null = true
  }
  column "source" {
    type    = local.text
    null    = false
    default = "live"
  }
  column "observed_at" {
    type = local.timestamp
    null = false
  }
  column "settled_at" {
    type = local.timestamp
    null = true
  }
  column "updated_at" {
    type = local.timestamp
    null = false
  }
  primary_key {
    columns = [column.id]
  }
  foreign_key "task_session_subagents_task_session_id_fkey" {
    columns     = [column.task_session_id]
    ref_columns = [table.task_sessions.column.id]
    on_delete   = CASCADE
  }
  # The upsert key (AC-14, AC-30). Column order is part of the contract:
  # task_session_id leads so the backing index serves session reads (AC-13).
  index "task_session_subagents_session_execution_tool_call_key" {
    unique  = true
    columns = [column.task_session_id, column.agent_execution_id, column.tool_call_id]
  }
  index "idx_subagents_session_id" {
    columns = [column.task_session_id]
  }
  index "idx_subagents_task_id" {
    columns = [column.task_id]
  }
  index "idx_subagents_turn_id" {
    columns = [column.turn_id]
  }
}

# One row per background agent execution: the host's lifecycle summary
# (run_in_background, todo-task delegation, scheduled children), kept for fast
# lifecycle queries. The child's own transcript is a file below the
# conversation-storage root (package transcript); this row points at it.
# transcript_path and transcript_status were added to an already-deployed
# table: both are nullable, so a reconcile adds them with ALTER TABLE and never
# rebuilds the table or touches its rows. transcript_status is 'ok' or
# 'error: …' — a reader can tell a real transcript from a missing one.
table "background_agent_log" {
  schema = schema.main
  column "workspace_path" {
    type = local.text
    null = false
  }
  column "session_id" {
    type = local.text
    null = false
  }
  column "agent_id" {
    type = local.text
    null = false
  }
  column "execution_id" {
    type = local.text
    null = true
  }
  column "kind" {
    type = local.text
    null = false
  }
  column "provider" {
    type = local.text
    null = true
  }
  column "model" {
    type = local.text
    null = true
  }
  column "status" {
    type = local.text
    null = false
  }
  column "started_at" {
    type = local.timestamp
    null = false
  }
  column "completed_at" {
    type = local.timestamp
    null = true
  }
  column "error" {
    type = local.text
    null = true
  }
  column "transcript_path" {
    type = local.text
    null = true
  }
  column "transcript_status" {
    type = local.text
    null = true
  }
  primary_key {
    columns = [column.workspace_path, column.session_id, column.agent_id]
  }
  index "idx_background_agent_log_session_id" {
    columns = [column.session_id]
  }
}
