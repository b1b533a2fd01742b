-- Conversation health over time (`health --series`, the viewer's chart, /metrics) groups the conversations
-- started in a bounded window (last 24 h hourly, last 30 d daily) by their start hour or day. Without
-- this index that window is a scan of every conversation of the tenant; with it, a range scan of the
-- window's rows. created_at never changes after the insert, so appends (which move updated_at) stay HOT
-- updates: the index costs one entry per new conversation and nothing per turn.
-- IF NOT EXISTS: on a large table, build it beforehand without blocking writes (docs/operations.md,
-- Migrations): CREATE INDEX CONCURRENTLY conversations_created_idx ON <schema>.conversations (tenant_id, created_at)
CREATE INDEX IF NOT EXISTS conversations_created_idx ON {schema}.conversations (tenant_id, created_at);
