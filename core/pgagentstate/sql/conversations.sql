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

-- name: advisory_lock
-- %(key)s: sealing.lock_key(), unambiguous per (tenant, kind, name) and keyed when encryption is on.
SELECT pg_advisory_xact_lock(%(key)s::bigint)

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

-- name: conversation_load
-- A conversation, its newest %(limit)s events (none when %(limit)s is 0) and the state documents asked
-- for, in ONE statement: one round trip and, being one statement, one snapshot. Rows share one shape:
--   kind  t1         t2       t3    t4         t5       t6       t7      t8        n1       n2        ts1         ts2
--   'c'   tenant_id  id       app   framework  user_id  channel  status  metadata  version  last_seq  created_at  updated_at
--   'e'   conv id    event_id kind  author     -        -        -       payload   seq      -         created_at  -
-- {event_columns} is that 'e' row, or only its payload and seq (a reader that needs nothing else: 1,000 rows
-- of four text columns and a timestamp took longer to receive and parse than to read on the server).
--   's'   scope      app      subj  name       -        -        -       data      version  ord       updated_at  -
SELECT 'c' AS k, c.tenant_id AS t1, c.id AS t2, c.app AS t3, c.framework AS t4, c.user_id AS t5, c.channel AS t6,
       c.status AS t7, c.metadata::text AS t8, c.version AS n1, c.last_seq AS n2, c.created_at AS ts1,
       c.updated_at AS ts2
FROM {schema}.conversations c
WHERE c.tenant_id = %(tenant)s AND c.id = %(id)s
UNION ALL
SELECT * FROM (
    SELECT 'e', {event_columns}
    FROM {schema}.events e
    WHERE e.tenant_id = %(tenant)s AND e.conversation_id = %(id)s AND coalesce(%(limit)s::bigint, 1) > 0
      AND (%(since)s::timestamptz IS NULL OR e.created_at >= %(since)s)
      AND (%(kinds)s::text[] IS NULL OR e.kind = ANY(%(kinds)s::text[]))
    ORDER BY e.seq DESC
    LIMIT %(limit)s
) newest
UNION ALL
SELECT 's', d.scope, d.app, d.subject, d.name, NULL, NULL, NULL, d.data::text, d.version, r.ord, d.updated_at, NULL
FROM unnest(%(scopes)s::text[], %(apps)s::text[], %(subjects)s::text[], %(names)s::text[])
     WITH ORDINALITY AS r(scope, app, subject, name, ord)
JOIN {schema}.state_documents d
  ON d.tenant_id = %(tenant)s AND d.scope = r.scope AND d.app = r.app AND d.subject = r.subject AND d.name = r.name
 -- all documents of one subject (the usual case): the subject as a constant too, so that a table partitioned
 -- or distributed by subject is pruned at plan time (tests/core/test_partitioning.py)
 AND (%(subject)s::text IS NULL OR d.subject = %(subject)s)
