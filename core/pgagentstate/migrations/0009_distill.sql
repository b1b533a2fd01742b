-- Distillation watermarks: how far into each conversation's event log facts were extracted (see
-- pgagentstate.distill). Advanced in the transaction that writes the facts, so a crash leaves both or
-- neither; the position a distillation covers is also its run_once key, so it runs once.
CREATE TABLE {schema}.distill_watermarks (
    tenant_id       text        NOT NULL,
    conversation_id text        NOT NULL,
    seq             bigint      NOT NULL,
    facts           integer     NOT NULL DEFAULT 0,
    updated_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, conversation_id),
    FOREIGN KEY (tenant_id, conversation_id)
        REFERENCES {schema}.conversations (tenant_id, id) ON DELETE CASCADE
);
ALTER TABLE {schema}.distill_watermarks ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON {schema}.distill_watermarks
    USING (tenant_id = current_setting('pgagentstate.tenant', true));
