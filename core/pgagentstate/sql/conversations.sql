-- Conversations. Every statement is scoped by %(tenant)s. Columns returned, in order:
-- tenant_id, id, app, framework, user_id, channel, status, metadata, version, last_seq, created_at, updated_at

-- name: conversation_create
INSERT INTO {schema}.conversations AS c (tenant_id, id, app, framework, user_id, channel, status, metadata)
VALUES (%(tenant)s, %(id)s, %(app)s, %(framework)s, %(user_id)s, %(channel)s, %(status)s, %(metadata)s::jsonb)
ON CONFLICT (tenant_id, id) DO NOTHING
RETURNING c.tenant_id, c.id, c.app, c.framework, c.user_id, c.channel, c.status, c.metadata::text,
          c.version, c.last_seq, c.created_at, c.updated_at

-- name: conversation_get
SELECT c.tenant_id, c.id, c.app, c.framework, c.user_id, c.channel, c.status, c.metadata::text,
       c.version, c.last_seq, c.created_at, c.updated_at
FROM {schema}.conversations c
WHERE c.tenant_id = %(tenant)s AND c.id = %(id)s

-- name: conversation_list
SELECT c.tenant_id, c.id, c.app, c.framework, c.user_id, c.channel, c.status, c.metadata::text,
       c.version, c.last_seq, c.created_at, c.updated_at
FROM {schema}.conversations c
WHERE c.tenant_id = %(tenant)s
  AND (%(app)s::text IS NULL OR c.app = %(app)s)
  AND (%(framework)s::text IS NULL OR c.framework = %(framework)s)
  AND (%(user_id)s::text IS NULL OR c.user_id = %(user_id)s)
  AND (%(status)s::text IS NULL OR c.status = %(status)s)
  AND (%(updated_before)s::timestamptz IS NULL OR c.updated_at < %(updated_before)s)
ORDER BY c.updated_at DESC, c.id
LIMIT %(limit)s OFFSET %(offset)s

-- name: conversation_update
UPDATE {schema}.conversations c
SET status = coalesce(%(status)s, c.status),
    metadata = CASE WHEN %(metadata)s::jsonb IS NULL THEN c.metadata ELSE c.metadata || %(metadata)s::jsonb END,
    version = c.version + 1,
    updated_at = now()
WHERE c.tenant_id = %(tenant)s AND c.id = %(id)s
  AND (%(expected_version)s::bigint IS NULL OR c.version = %(expected_version)s)
RETURNING c.tenant_id, c.id, c.app, c.framework, c.user_id, c.channel, c.status, c.metadata::text,
          c.version, c.last_seq, c.created_at, c.updated_at

-- name: conversation_version
SELECT c.version, c.last_seq FROM {schema}.conversations c WHERE c.tenant_id = %(tenant)s AND c.id = %(id)s

-- name: conversation_delete
WITH gone AS (
    DELETE FROM {schema}.conversations c WHERE c.tenant_id = %(tenant)s AND c.id = %(id)s RETURNING c.id
), docs AS (
    DELETE FROM {schema}.state_documents d
    WHERE d.tenant_id = %(tenant)s AND d.scope = 'conversation' AND d.subject = %(id)s
), changes AS (
    DELETE FROM {schema}.state_changes d
    WHERE d.tenant_id = %(tenant)s AND d.scope = 'conversation' AND d.subject = %(id)s
)
SELECT count(*) FROM gone

-- name: conversation_lock
SELECT pg_advisory_xact_lock(hashtextextended('pgagentstate.conversation:' || %(tenant)s || ':' || %(id)s, 0))

-- name: lock_timeout
SELECT set_config('lock_timeout', %(timeout)s, true)

-- name: set_tenant
SELECT set_config('pgagentstate.tenant', %(tenant)s, true)

-- name: turn_check
-- First statement of a turn's commit: locks the conversation and aborts the whole pipelined transaction
-- (SQLSTATE PAS01) unless it is still at the version the turn loaded.
SELECT {schema}.check_version(
    %(expected_version)s,
    (SELECT c.version FROM {schema}.conversations c WHERE c.tenant_id = %(tenant)s AND c.id = %(id)s FOR UPDATE),
    'conversation ' || %(id)s)
