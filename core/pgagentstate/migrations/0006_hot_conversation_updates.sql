-- Every append updates its conversation row (last_seq, version, updated_at). With updated_at in an index
-- that update cannot be HOT: it wrote a new entry into three indexes each time. Without it the update
-- stays on the heap page (HOT) and touches no index; listings sort the few rows of one user or status.
DROP INDEX {schema}.conversations_app_user_idx;
DROP INDEX {schema}.conversations_status_idx;
CREATE INDEX conversations_app_user_idx ON {schema}.conversations (tenant_id, app, user_id);
CREATE INDEX conversations_status_idx ON {schema}.conversations (tenant_id, status);
