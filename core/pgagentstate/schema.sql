-- pgagentstate canonical schema: what all migrations together produce. Kept equal to them by
-- tests/core/test_migrations.py. "{schema}" is replaced by the quoted schema name.
-- Every table leads with tenant_id: row-level security keys on it, and every lookup index starts with it.

CREATE TABLE {schema}.conversations (
    tenant_id   text        NOT NULL,
    id          text        NOT NULL,
    app         text        NOT NULL DEFAULT '',
    framework   text        NOT NULL DEFAULT '',
    user_id     text        NOT NULL DEFAULT '',
    channel     text        NOT NULL DEFAULT '',
    status      text        NOT NULL DEFAULT 'active',
    metadata    jsonb       NOT NULL DEFAULT '{}',
    version     bigint      NOT NULL DEFAULT 1,
    last_seq    bigint      NOT NULL DEFAULT 0,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, id),
    CONSTRAINT conversations_status_check CHECK (
        status IN ('active', 'waiting_customer', 'awaiting_approval', 'completed', 'failed', 'abandoned'))
);
-- No updated_at in these indexes: appends update it, and must stay HOT updates (migration 0006).
CREATE INDEX conversations_app_user_idx ON {schema}.conversations (tenant_id, app, user_id);
CREATE INDEX conversations_status_idx ON {schema}.conversations (tenant_id, status);
-- Health over time: conversations started in a window (migration 0012); created_at never changes.
CREATE INDEX conversations_created_idx ON {schema}.conversations (tenant_id, created_at);

-- Append-only per conversation; seq is allocated from conversations.last_seq under that row's lock, so a
-- batch is contiguous and a seq is never handed out twice (pops and replacements move last_seq forward).
CREATE TABLE {schema}.events (
    tenant_id       text        NOT NULL,
    conversation_id text        NOT NULL,
    seq             bigint      NOT NULL,
    event_id        text        NOT NULL,
    kind            text        NOT NULL DEFAULT 'message',
    author          text        NOT NULL DEFAULT '',
    payload         json        NOT NULL,  -- its text: nothing queries inside it (0016)
    created_at      timestamptz NOT NULL DEFAULT now(),
    -- when the store wrote it (created_at is the application's clock); NULL for events before 0010
    recorded_at     timestamptz DEFAULT now(),
    PRIMARY KEY (tenant_id, conversation_id, seq),
    CONSTRAINT events_event_id_key UNIQUE (tenant_id, conversation_id, event_id),
    FOREIGN KEY (tenant_id, conversation_id)
        REFERENCES {schema}.conversations (tenant_id, id) ON DELETE CASCADE
);

-- Versioned JSON documents. scope: 'conversation' (subject = conversation id), 'user' (subject = user id
-- within app) or 'app' (subject = ''). Conversation documents go when their conversation goes.
CREATE TABLE {schema}.state_documents (
    tenant_id  text        NOT NULL,
    scope      text        NOT NULL,
    app        text        NOT NULL DEFAULT '',
    subject    text        NOT NULL DEFAULT '',
    name       text        NOT NULL DEFAULT 'state',
    version    bigint      NOT NULL,
    data       jsonb       NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, scope, app, subject, name),
    CONSTRAINT state_documents_scope_check CHECK (scope IN ('conversation', 'user', 'app'))
);

-- Every version of every state document, for time travel and audit.
CREATE TABLE {schema}.state_changes (
    tenant_id  text        NOT NULL,
    scope      text        NOT NULL,
    app        text        NOT NULL DEFAULT '',
    subject    text        NOT NULL DEFAULT '',
    name       text        NOT NULL DEFAULT 'state',
    version    bigint      NOT NULL,
    data       jsonb       NOT NULL,
    changed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, scope, app, subject, name, version)
);

CREATE TABLE {schema}.workflow_steps (
    tenant_id        text        NOT NULL,
    conversation_id  text        NOT NULL,
    workflow         text        NOT NULL,
    step             text        NOT NULL,
    position         integer     NOT NULL DEFAULT 0,
    status           text        NOT NULL DEFAULT 'pending',
    attempts         integer     NOT NULL DEFAULT 0,
    last_error       text,
    result           jsonb,
    lease_expires_at timestamptz,
    started_at       timestamptz,
    completed_at     timestamptz,
    updated_at       timestamptz NOT NULL DEFAULT now(),
    -- attempts that did not finish before another started: [{at, status, error, lease_expires_at}], newest 20
    retries          jsonb,
    PRIMARY KEY (tenant_id, conversation_id, workflow, step),
    CONSTRAINT workflow_steps_status_check CHECK (
        status IN ('pending', 'in_progress', 'awaiting_approval', 'completed', 'failed')),
    FOREIGN KEY (tenant_id, conversation_id)
        REFERENCES {schema}.conversations (tenant_id, id) ON DELETE CASCADE
);
CREATE INDEX workflow_steps_status_idx ON {schema}.workflow_steps (tenant_id, status, lease_expires_at);

-- External side effects: intent recorded before the call, outcome after it. No foreign key: the record
-- of a payment outlives the conversation that caused it.
CREATE TABLE {schema}.idempotency_keys (
    tenant_id        text        NOT NULL,
    key              text        NOT NULL,
    conversation_id  text,
    api              text        NOT NULL DEFAULT '',
    request_hash     text        NOT NULL,
    request          jsonb,
    status           text        NOT NULL,
    result           jsonb,
    error            text,
    owner            text        NOT NULL,
    attempts         integer     NOT NULL DEFAULT 1,
    duplicate_hits   integer     NOT NULL DEFAULT 0,
    lease_expires_at timestamptz NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    completed_at     timestamptz,
    -- claims taken over: [{at, status, owner, lease_expires_at}] of the attempt replaced (failed, or lease run out)
    retries          jsonb,
    PRIMARY KEY (tenant_id, key),
    CONSTRAINT idempotency_keys_status_check CHECK (status IN ('in_progress', 'succeeded', 'failed'))
);
CREATE INDEX idempotency_keys_conversation_idx ON {schema}.idempotency_keys (tenant_id, conversation_id);

-- Long-term memory. ns_path is the namespace joined with U+001F (each label followed by one), in the C
-- collation so that a namespace prefix is a primary-key range scan.
CREATE TABLE {schema}.memories (
    tenant_id   text             NOT NULL,
    ns_path     text COLLATE "C" NOT NULL,
    key         text             NOT NULL,
    namespace   text[]           NOT NULL,
    user_id     text             NOT NULL DEFAULT '',
    value       jsonb            NOT NULL,
    -- terms of the value's strings, built by the core (pgagentstate.textsearch); NULL when encrypted
    search      tsvector,
    version     bigint           NOT NULL DEFAULT 1,
    ttl_seconds double precision,
    expires_at  timestamptz,
    created_at  timestamptz      NOT NULL DEFAULT now(),
    updated_at  timestamptz      NOT NULL DEFAULT now(),
    -- the order items were first stored in (equal-rank search hits keep it)
    seq         bigint           GENERATED ALWAYS AS IDENTITY,
    -- true when the item's memory_vectors rows belong to its current value (written through an index)
    indexed     boolean          NOT NULL DEFAULT false,
    PRIMARY KEY (tenant_id, ns_path, key)
);
CREATE INDEX memories_search_idx ON {schema}.memories USING gin (search);
CREATE INDEX memories_user_idx ON {schema}.memories (tenant_id, user_id);
CREATE INDEX memories_expires_idx ON {schema}.memories (expires_at) WHERE expires_at IS NOT NULL;

-- Embeddings of memories (see pgagentstate.embedding): one row per embedded field of an item. real[] on
-- every server; with pgvector, setup() adds an HNSW/IVFFlat index on (embedding::vector(dims)), partial
-- on dims. An encrypted store that seals its embeddings keeps them in `sealed` instead.
CREATE TABLE {schema}.memory_vectors (
    tenant_id text             NOT NULL,
    ns_path   text COLLATE "C" NOT NULL,
    key       text             NOT NULL,
    field     text             NOT NULL,
    text_hash bytea            NOT NULL,
    dims      integer          NOT NULL,
    norm      real,
    embedding real[],
    sealed    bytea,
    PRIMARY KEY (tenant_id, ns_path, key, field),
    FOREIGN KEY (tenant_id, ns_path, key) REFERENCES {schema}.memories (tenant_id, ns_path, key) ON DELETE CASCADE
);
ALTER TABLE {schema}.memory_vectors ALTER COLUMN embedding SET STORAGE EXTERNAL;

-- The dot product without pgvector (exact search).
CREATE FUNCTION {schema}.memory_dot(a real[], b double precision[]) RETURNS double precision
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS 'SELECT sum(x * y) FROM unnest(a, b) AS t(x, y)';

-- Short-term scratchpad of a conversation, with an optional expiry.
CREATE TABLE {schema}.scratchpad (
    tenant_id       text        NOT NULL,
    conversation_id text        NOT NULL,
    key             text        NOT NULL,
    value           jsonb       NOT NULL,
    expires_at      timestamptz,
    updated_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, conversation_id, key),
    FOREIGN KEY (tenant_id, conversation_id)
        REFERENCES {schema}.conversations (tenant_id, id) ON DELETE CASCADE
);
CREATE INDEX scratchpad_expires_idx ON {schema}.scratchpad (expires_at) WHERE expires_at IS NOT NULL;

-- Snapshot ids and chunk hashes are stored as raw bytes; statements convert at the edge.
-- A canonical lowercase UUID is its 16 bytes; any other id its UTF-8 bytes, with a NUL byte appended
-- when they are 16 bytes long (text holds no NUL, so no other id ends in one). Byte order is the text's
-- order for UUIDs and for other ids (C collation); only ids of the two kinds compare differently.
CREATE FUNCTION {schema}.id_bytes(t text) RETURNS bytea
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN t ~ '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'
            THEN decode(replace(t, '-', ''), 'hex')
        WHEN octet_length(t) = 16 THEN convert_to(t, 'UTF8') || '\x00'::bytea
        ELSE convert_to(t, 'UTF8')
    END
$$;

CREATE FUNCTION {schema}.id_text(b bytea) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN octet_length(b) = 16 THEN encode(b, 'hex')::uuid::text
        WHEN octet_length(b) = 17 AND get_byte(b, 16) = 0 THEN convert_from(substring(b FROM 1 FOR 16), 'UTF8')
        ELSE convert_from(b, 'UTF8')
    END
$$;

-- Chunk hashes: one or more 16-character base64url hashes, concatenated, to their 12-byte raw forms
-- (16 base64 characters are exactly 12 bytes, so a list converts in one call), and back.
CREATE FUNCTION {schema}.hash_bytes(t text) RETURNS bytea
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT decode(translate(t, '-_', '+/'), 'base64')
$$;

CREATE FUNCTION {schema}.hash_text(b bytea) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT translate(encode(b, 'base64'), E'+/\n', '-_')
$$;

-- The raw hashes of a list, one row each. STRICT keeps it from being inlined, so that the planner takes
-- ROWS 16 (a list that extends a base holds up to 16) rather than generate_series's 1000: with 1000, a
-- read's estimated cost passed jit_above_cost and JIT compilation took 8 s of a 15 ms read.
CREATE FUNCTION {schema}.hash_split(b bytea) RETURNS SETOF bytea
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE ROWS 16 AS $$
    SELECT substring(b FROM i FOR 12) FROM generate_series(1, octet_length(b), 12) AS i
$$;

-- Snapshots (LangGraph checkpoints and similar): a chain per (conversation, namespace) via parent_id.
CREATE TABLE {schema}.snapshots (
    tenant_id        text        NOT NULL,
    conversation_id  text        NOT NULL,
    namespace        text        NOT NULL DEFAULT '',
    snapshot_id      bytea       NOT NULL,  -- id_bytes() of the caller's id (migration 0015)
    parent_id        bytea,
    run_id           text,
    type             text        NOT NULL,
    data             bytea       NOT NULL,
    metadata         jsonb       NOT NULL DEFAULT '{}',
    channel_versions jsonb       NOT NULL DEFAULT '{}',
    created_at       timestamptz NOT NULL DEFAULT now(),
    -- false: continues its chain (at most one such child per parent, see snapshots_linear_child_idx);
    -- true: a branch started on purpose (time travel, update_state on an old checkpoint).
    forked           boolean     NOT NULL DEFAULT false,
    PRIMARY KEY (tenant_id, conversation_id, namespace, snapshot_id),
    FOREIGN KEY (tenant_id, conversation_id)
        REFERENCES {schema}.conversations (tenant_id, id) ON DELETE CASCADE
);
CREATE INDEX snapshots_run_idx ON {schema}.snapshots (tenant_id, run_id) WHERE run_id IS NOT NULL;
-- Two writers that loaded the same head cannot both commit a child of it (no silent forks).
CREATE UNIQUE INDEX snapshots_linear_child_idx
    ON {schema}.snapshots (tenant_id, conversation_id, namespace, (coalesce(parent_id, ''::bytea)))
    WHERE NOT forked;

-- A channel value at a version, as an ordered list of content-addressed chunks: a list that only grew
-- since the previous version shares all its old chunks, so storage grows linearly, not quadratically.
CREATE TABLE {schema}.snapshot_blobs (
    tenant_id       text  NOT NULL,
    conversation_id text  NOT NULL,
    namespace       text  NOT NULL DEFAULT '',
    channel         text  NOT NULL,
    version         text  NOT NULL,
    type            text  NOT NULL,
    chunks          bytea NOT NULL,  -- the 12-byte hashes of its chunks, concatenated
    -- NULL: chunks is the whole list; else the version of the same channel whose list this one extends
    -- (chunks holds only what was appended), so a list that only grew costs its new elements.
    base            text,
    PRIMARY KEY (tenant_id, conversation_id, namespace, channel, version),
    FOREIGN KEY (tenant_id, conversation_id)
        REFERENCES {schema}.conversations (tenant_id, id) ON DELETE CASCADE
);

CREATE TABLE {schema}.snapshot_chunks (
    tenant_id       text  NOT NULL,
    conversation_id text  NOT NULL,
    hash            bytea NOT NULL,  -- 96-bit BLAKE2b (or its keyed id), 12 raw bytes
    data            bytea NOT NULL,
    PRIMARY KEY (tenant_id, conversation_id, hash),
    FOREIGN KEY (tenant_id, conversation_id)
        REFERENCES {schema}.conversations (tenant_id, id) ON DELETE CASCADE
);

CREATE TABLE {schema}.snapshot_writes (
    tenant_id       text    NOT NULL,
    conversation_id text    NOT NULL,
    namespace       text    NOT NULL DEFAULT '',
    snapshot_id     bytea   NOT NULL,
    task_id         bytea   NOT NULL,
    idx             integer NOT NULL,
    channel         text    NOT NULL,
    type            text    NOT NULL,
    data            bytea   NOT NULL,
    task_path       text    NOT NULL DEFAULT '',
    PRIMARY KEY (tenant_id, conversation_id, namespace, snapshot_id, task_id, idx),
    FOREIGN KEY (tenant_id, conversation_id)
        REFERENCES {schema}.conversations (tenant_id, id) ON DELETE CASCADE
);

-- Threads deleted through the snapshot API: a late write of a run still in flight must not bring the
-- thread back. A new chain (a parentless snapshot) or a copy clears the mark.
CREATE TABLE {schema}.snapshot_tombstones (
    tenant_id       text        NOT NULL,
    conversation_id text        NOT NULL,
    deleted_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, conversation_id)
);

-- Raises inside a pipelined transaction when a version check fails, so that the statements queued
-- after it are not executed and nothing of the transaction commits. SQLSTATEs PAS01 / PAS02 are mapped
-- to VersionConflict / NotFound by pgagentstate.errors.translate.
CREATE FUNCTION {schema}.check_version(expected bigint, actual bigint, what text) RETURNS bigint
LANGUAGE plpgsql AS $$
BEGIN
    IF actual IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'PAS02', MESSAGE = what || ' does not exist';
    END IF;
    IF expected IS DISTINCT FROM actual THEN
        RAISE EXCEPTION USING ERRCODE = 'PAS01', MESSAGE = what || ' conflict',
            DETAIL = coalesce(expected::text, '') || ' ' || actual::text;
    END IF;
    RETURN actual;
END
$$;

-- Row-level security: a role that is not the owner sees only the rows of the tenant named by
-- SET LOCAL pgagentstate.tenant (set by the store in every transaction when tenant isolation is on).
-- No tenant set -> current_setting(..., true) is NULL -> no row matches.
ALTER TABLE {schema}.conversations ENABLE ROW LEVEL SECURITY;
ALTER TABLE {schema}.events ENABLE ROW LEVEL SECURITY;
ALTER TABLE {schema}.state_documents ENABLE ROW LEVEL SECURITY;
ALTER TABLE {schema}.state_changes ENABLE ROW LEVEL SECURITY;
ALTER TABLE {schema}.workflow_steps ENABLE ROW LEVEL SECURITY;
ALTER TABLE {schema}.idempotency_keys ENABLE ROW LEVEL SECURITY;
ALTER TABLE {schema}.memories ENABLE ROW LEVEL SECURITY;
ALTER TABLE {schema}.memory_vectors ENABLE ROW LEVEL SECURITY;
ALTER TABLE {schema}.scratchpad ENABLE ROW LEVEL SECURITY;
ALTER TABLE {schema}.snapshots ENABLE ROW LEVEL SECURITY;
ALTER TABLE {schema}.snapshot_blobs ENABLE ROW LEVEL SECURITY;
ALTER TABLE {schema}.snapshot_chunks ENABLE ROW LEVEL SECURITY;
ALTER TABLE {schema}.snapshot_writes ENABLE ROW LEVEL SECURITY;
ALTER TABLE {schema}.snapshot_tombstones ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON {schema}.conversations
    USING (tenant_id = current_setting('pgagentstate.tenant', true));
CREATE POLICY tenant_isolation ON {schema}.events
    USING (tenant_id = current_setting('pgagentstate.tenant', true));
CREATE POLICY tenant_isolation ON {schema}.state_documents
    USING (tenant_id = current_setting('pgagentstate.tenant', true));
CREATE POLICY tenant_isolation ON {schema}.state_changes
    USING (tenant_id = current_setting('pgagentstate.tenant', true));
CREATE POLICY tenant_isolation ON {schema}.workflow_steps
    USING (tenant_id = current_setting('pgagentstate.tenant', true));
CREATE POLICY tenant_isolation ON {schema}.idempotency_keys
    USING (tenant_id = current_setting('pgagentstate.tenant', true));
CREATE POLICY tenant_isolation ON {schema}.memories
    USING (tenant_id = current_setting('pgagentstate.tenant', true));
CREATE POLICY tenant_isolation ON {schema}.memory_vectors
    USING (tenant_id = current_setting('pgagentstate.tenant', true));
CREATE POLICY tenant_isolation ON {schema}.scratchpad
    USING (tenant_id = current_setting('pgagentstate.tenant', true));
CREATE POLICY tenant_isolation ON {schema}.snapshots
    USING (tenant_id = current_setting('pgagentstate.tenant', true));
CREATE POLICY tenant_isolation ON {schema}.snapshot_blobs
    USING (tenant_id = current_setting('pgagentstate.tenant', true));
CREATE POLICY tenant_isolation ON {schema}.snapshot_chunks
    USING (tenant_id = current_setting('pgagentstate.tenant', true));
CREATE POLICY tenant_isolation ON {schema}.snapshot_writes
    USING (tenant_id = current_setting('pgagentstate.tenant', true));
CREATE POLICY tenant_isolation ON {schema}.snapshot_tombstones
    USING (tenant_id = current_setting('pgagentstate.tenant', true));

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

-- Distillation watermarks: how far into each conversation's event log facts were extracted (see
-- pgagentstate.distill); advanced in the transaction that writes the facts.
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
