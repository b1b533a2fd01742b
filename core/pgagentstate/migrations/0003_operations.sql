-- Operations: an archive for retention, and indexes for the per-user export/erase and the health query.

-- Conversations archived by `pgagentstate gc --archive`: one JSON document per conversation (its events,
-- state versions, workflow steps and ledger entries), written in the same statement that deletes the live
-- rows. Payload, state data and results inside the document are in the store's storage form (see
-- pgagentstate.codec). The key includes archived_at: an id reused after archiving is archived again.
CREATE TABLE {schema}.archived_conversations (
    tenant_id   text        NOT NULL,
    id          text        NOT NULL,
    archived_at timestamptz NOT NULL DEFAULT now(),
    app         text        NOT NULL DEFAULT '',
    framework   text        NOT NULL DEFAULT '',
    user_id     text        NOT NULL DEFAULT '',
    status      text        NOT NULL,
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL,
    document    jsonb       NOT NULL,
    PRIMARY KEY (tenant_id, id, archived_at)
);
CREATE INDEX archived_conversations_user_idx ON {schema}.archived_conversations (tenant_id, user_id);
ALTER TABLE {schema}.archived_conversations ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON {schema}.archived_conversations
    USING (tenant_id = current_setting('pgagentstate.tenant', true));

-- Export/erase of one user (GDPR) finds their conversations without scanning the tenant's: the
-- (tenant_id, app, user_id, ...) index cannot serve a lookup by user across apps.
CREATE INDEX conversations_user_idx ON {schema}.conversations (tenant_id, user_id) WHERE user_id <> '';

-- `health` sums duplicate hits over the few ledger rows that ever had one; duplicate_hits only changes on
-- a replay, so the index costs nothing on the claim/succeed path (those updates stay HOT).
CREATE INDEX idempotency_keys_duplicates_idx ON {schema}.idempotency_keys (tenant_id) WHERE duplicate_hits > 0;
