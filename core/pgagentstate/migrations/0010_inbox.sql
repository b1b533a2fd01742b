-- The durable inbox (pgagentstate.ops.inbox): messages accepted from a channel before any agent runs, then
-- worked one turn at a time per conversation, in arrival order, by whichever worker claims the
-- conversation. inbox_queues holds one row per conversation: its counters and the lease of the worker
-- running its turn (the unit a worker claims); inbox_messages the messages themselves.
CREATE TABLE {schema}.inbox_queues (
    tenant_id        text        NOT NULL,
    conversation_id  text        NOT NULL,
    last_seq         bigint      NOT NULL DEFAULT 0,  -- the last message accepted
    done_seq         bigint      NOT NULL DEFAULT 0,  -- every message up to here is finished (done or failed)
    owner            text,                            -- the worker that claimed the turn last
    lease_expires_at timestamptz,                     -- claimable again after this (NULL: at once)
    ready_at         timestamptz,                     -- when the next message arrived: the oldest goes first
    recoveries       bigint      NOT NULL DEFAULT 0,  -- turns taken over from a worker whose lease ran out
    PRIMARY KEY (tenant_id, conversation_id),
    FOREIGN KEY (tenant_id, conversation_id)
        REFERENCES {schema}.conversations (tenant_id, id) ON DELETE CASCADE
);
-- Claims scan only conversations with work waiting, oldest first.
CREATE INDEX inbox_queues_ready_idx ON {schema}.inbox_queues (tenant_id, ready_at) WHERE last_seq > done_seq;
ALTER TABLE {schema}.inbox_queues ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON {schema}.inbox_queues
    USING (tenant_id = current_setting('pgagentstate.tenant', true));

CREATE TABLE {schema}.inbox_messages (
    tenant_id       text        NOT NULL,
    conversation_id text        NOT NULL,
    seq             bigint      NOT NULL,
    delivery_id     text        NOT NULL,  -- the channel's id of the delivery (a WhatsApp wamid): its idempotency key
    request_hash    text        NOT NULL,  -- tells a redelivery from a reuse of the key for another message
    message         jsonb       NOT NULL,
    status          text        NOT NULL DEFAULT 'waiting',
    attempts        integer     NOT NULL DEFAULT 0,
    worker          text,
    result          jsonb,
    error           text,
    accepted_at     timestamptz NOT NULL DEFAULT now(),
    started_at      timestamptz,
    finished_at     timestamptz,
    PRIMARY KEY (tenant_id, conversation_id, seq),
    CONSTRAINT inbox_messages_delivery_key UNIQUE (tenant_id, conversation_id, delivery_id),
    CONSTRAINT inbox_messages_status_check CHECK (status IN ('waiting', 'running', 'done', 'failed')),
    FOREIGN KEY (tenant_id, conversation_id)
        REFERENCES {schema}.inbox_queues (tenant_id, conversation_id) ON DELETE CASCADE
);
-- Queue depth, the oldest waiting message's age and the failed count read only the messages not done.
CREATE INDEX inbox_messages_open_idx ON {schema}.inbox_messages (tenant_id, accepted_at)
    WHERE status <> 'done';
ALTER TABLE {schema}.inbox_messages ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON {schema}.inbox_messages
    USING (tenant_id = current_setting('pgagentstate.tenant', true));
-- `health` sums recoveries over the few conversations that ever had one.
CREATE INDEX inbox_queues_recoveries_idx ON {schema}.inbox_queues (tenant_id) WHERE recoveries > 0;
