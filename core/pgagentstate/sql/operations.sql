-- Operator queries: health, listings, timelines, retention (gc), statistics, export and erase of a user,
-- and the catalog reads of `doctor`. Every statement is scoped by %(tenant)s except the catalog reads.
-- "Open" conversations are active, waiting_customer and awaiting_approval; an open conversation without
-- activity for %(idle)s seconds counts as abandoned.

-- name: ops_health_conversations
-- Per status: conversations with recent activity and idle ones. An index-only scan of
-- conversations_status_idx (tenant_id, status, updated_at).
SELECT c.status,
       count(*) FILTER (WHERE c.updated_at >= now() - make_interval(secs => %(idle)s)),
       count(*) FILTER (WHERE c.updated_at < now() - make_interval(secs => %(idle)s))
FROM {schema}.conversations c
WHERE c.tenant_id = %(tenant)s
GROUP BY c.status

-- name: ops_health_steps
-- Workflow steps by outcome; served by workflow_steps_status_idx (tenant_id, status, lease_expires_at).
SELECT count(*) FILTER (WHERE s.status = 'in_progress' AND s.lease_expires_at < now()),
       count(*) FILTER (WHERE s.status = 'in_progress' AND (s.lease_expires_at IS NULL OR s.lease_expires_at >= now())),
       count(*) FILTER (WHERE s.status = 'failed'),
       count(*) FILTER (WHERE s.status = 'awaiting_approval')
FROM {schema}.workflow_steps s
WHERE s.tenant_id = %(tenant)s AND s.status IN ('in_progress', 'failed', 'awaiting_approval')

-- name: ops_health_stuck_steps
-- The stuck steps themselves (in progress past their lease: the worker died or hangs), oldest first.
SELECT s.conversation_id, s.workflow, s.step, s.attempts, s.last_error, s.started_at, s.lease_expires_at
FROM {schema}.workflow_steps s
WHERE s.tenant_id = %(tenant)s AND s.status = 'in_progress' AND s.lease_expires_at < now()
ORDER BY s.lease_expires_at
LIMIT %(limit)s

-- name: ops_health_duplicates
-- Duplicate calls the ledger stopped (each replay of a recorded result); idempotency_keys_duplicates_idx.
SELECT coalesce(sum(k.duplicate_hits), 0)::bigint, count(*)
FROM {schema}.idempotency_keys k
WHERE k.tenant_id = %(tenant)s AND k.duplicate_hits > 0

-- name: ops_health_ledger
-- Side effects whose last attempt failed, and claims whose worker vanished (in progress past the lease).
SELECT count(*) FILTER (WHERE k.status = 'failed'),
       count(*) FILTER (WHERE k.status = 'in_progress' AND k.lease_expires_at < clock_timestamp()),
       count(*)
FROM {schema}.idempotency_keys k
WHERE k.tenant_id = %(tenant)s

-- name: ops_conversation_list
-- A page of conversations with their health. Filters and ordering run on the conversations alone; the
-- per-conversation step and ledger counts are computed for the page only.
WITH page AS (
    SELECT c.*,
           CASE WHEN c.status IN ('active', 'waiting_customer', 'awaiting_approval')
                     AND c.updated_at < now() - make_interval(secs => %(idle)s)
                THEN 'abandoned' ELSE c.status END AS health
    FROM {schema}.conversations c
    WHERE c.tenant_id = %(tenant)s
      AND (%(app)s::text IS NULL OR c.app = %(app)s)
      AND (%(framework)s::text IS NULL OR c.framework = %(framework)s)
      AND (%(user_id)s::text IS NULL OR c.user_id = %(user_id)s)
      AND (%(status)s::text IS NULL OR c.status = %(status)s)
      AND (%(idle_over)s::float8 IS NULL OR c.updated_at < now() - make_interval(secs => %(idle_over)s))
      AND (%(active_within)s::float8 IS NULL OR c.updated_at >= now() - make_interval(secs => %(active_within)s))
      AND (%(id_prefix)s::text IS NULL OR starts_with(c.id, %(id_prefix)s))
      AND (%(health)s::text IS NULL OR %(health)s = CASE
               WHEN c.status IN ('active', 'waiting_customer', 'awaiting_approval')
                    AND c.updated_at < now() - make_interval(secs => %(idle)s)
               THEN 'abandoned' ELSE c.status END)
      AND (NOT %(stuck_only)s OR EXISTS (
               SELECT 1 FROM {schema}.workflow_steps s
               WHERE s.tenant_id = c.tenant_id AND s.conversation_id = c.id
                 AND s.status = 'in_progress' AND s.lease_expires_at < now()))
    ORDER BY c.updated_at DESC, c.id
    LIMIT %(limit)s OFFSET %(offset)s
)
SELECT p.tenant_id, p.id, p.app, p.framework, p.user_id, p.channel, p.status, p.metadata::text,
       p.version, p.last_seq, p.created_at, p.updated_at,
       p.health, st.stuck, st.failed, lg.calls, lg.duplicate_hits
FROM page p
CROSS JOIN LATERAL (
    SELECT count(*) FILTER (WHERE s.status = 'in_progress' AND s.lease_expires_at < now()) AS stuck,
           count(*) FILTER (WHERE s.status = 'failed') AS failed
    FROM {schema}.workflow_steps s
    WHERE s.tenant_id = p.tenant_id AND s.conversation_id = p.id
) st
CROSS JOIN LATERAL (
    SELECT count(*) AS calls, coalesce(sum(k.duplicate_hits), 0)::bigint AS duplicate_hits
    FROM {schema}.idempotency_keys k
    WHERE k.tenant_id = p.tenant_id AND k.conversation_id = p.id
) lg
ORDER BY p.updated_at DESC, p.id

-- name: ops_state_versions
-- Every version of every conversation-scoped state document of one conversation, oldest first.
SELECT h.name, h.version, h.data::text, h.changed_at
FROM {schema}.state_changes h
WHERE h.tenant_id = %(tenant)s AND h.scope = 'conversation' AND h.app = '' AND h.subject = %(conversation_id)s
ORDER BY h.name, h.version

-- name: ops_scratch_all
-- The scratchpad including entries that expired but are not collected yet (the timeline shows both).
SELECT s.key, s.value::text, s.expires_at, s.updated_at, (s.expires_at IS NOT NULL AND s.expires_at <= now())
FROM {schema}.scratchpad s
WHERE s.tenant_id = %(tenant)s AND s.conversation_id = %(conversation_id)s
ORDER BY s.key

-- name: ops_snapshot_summary
-- Checkpoints per namespace: how many, the first and the newest (their data stays opaque here).
SELECT s.namespace, count(*), min(s.created_at), max(s.created_at),
       (array_agg(s.snapshot_id ORDER BY s.snapshot_id DESC))[1]
FROM {schema}.snapshots s
WHERE s.tenant_id = %(tenant)s AND s.conversation_id = %(conversation_id)s
GROUP BY s.namespace
ORDER BY s.namespace

-- name: ops_tenants
-- Distinct tenants by a skip scan of the conversations primary key (one index probe per tenant).
WITH RECURSIVE t(tenant_id) AS (
    (SELECT c.tenant_id FROM {schema}.conversations c ORDER BY c.tenant_id LIMIT 1)
    UNION ALL
    SELECT (SELECT c.tenant_id FROM {schema}.conversations c WHERE c.tenant_id > t.tenant_id
            ORDER BY c.tenant_id LIMIT 1)
    FROM t WHERE t.tenant_id IS NOT NULL
)
SELECT t.tenant_id FROM t WHERE t.tenant_id IS NOT NULL

-- ---------------------------------------------------------------------------------------------------
-- Retention. Each batch locks its rows with SKIP LOCKED (a turn holding a conversation is not waited
-- for, and two collectors never take the same rows) and re-checks the condition on the locked version.

-- name: ops_gc_scratch_count
SELECT count(*) FROM {schema}.scratchpad s
WHERE s.tenant_id = %(tenant)s AND s.expires_at <= now()

-- name: ops_gc_scratch
WITH victims AS (
    SELECT s.conversation_id, s.key FROM {schema}.scratchpad s
    WHERE s.tenant_id = %(tenant)s AND s.expires_at <= now()
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
DELETE FROM {schema}.scratchpad s
USING victims v
WHERE s.tenant_id = %(tenant)s AND s.conversation_id = v.conversation_id AND s.key = v.key

-- name: ops_gc_memory_count
SELECT count(*) FROM {schema}.memories m
WHERE m.tenant_id = %(tenant)s AND m.expires_at <= now()

-- name: ops_gc_memory
WITH victims AS (
    SELECT m.ns_path, m.key FROM {schema}.memories m
    WHERE m.tenant_id = %(tenant)s AND m.expires_at <= now()
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
DELETE FROM {schema}.memories m
USING victims v
WHERE m.tenant_id = %(tenant)s AND m.ns_path = v.ns_path AND m.key = v.key

-- name: ops_gc_conversations_count
SELECT count(*) FROM {schema}.conversations c
WHERE c.tenant_id = %(tenant)s AND c.status = %(status)s
  AND c.updated_at < now() - make_interval(secs => %(age)s)

-- name: ops_gc_conversations_delete
-- Deletes up to %(limit)s conversations of %(status)s idle for %(age)s seconds, with everything they own
-- (events, steps, scratchpad and checkpoints cascade; conversation state documents have no foreign key).
-- Ledger entries stay: the record of a payment outlives the conversation that caused it.
WITH victims AS (
    SELECT c.id FROM {schema}.conversations c
    WHERE c.tenant_id = %(tenant)s AND c.status = %(status)s
      AND c.updated_at < now() - make_interval(secs => %(age)s)
    ORDER BY c.updated_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), gone AS (
    DELETE FROM {schema}.conversations c USING victims v
    WHERE c.tenant_id = %(tenant)s AND c.id = v.id
    RETURNING c.id
), docs AS (
    DELETE FROM {schema}.state_documents d USING gone g
    WHERE d.tenant_id = %(tenant)s AND d.scope = 'conversation' AND d.app = '' AND d.subject = g.id
), changes AS (
    DELETE FROM {schema}.state_changes h USING gone g
    WHERE h.tenant_id = %(tenant)s AND h.scope = 'conversation' AND h.app = '' AND h.subject = g.id
)
SELECT count(*) FROM gone

-- name: ops_gc_conversations_archive
-- Like ops_gc_conversations_delete, but each conversation is first written to archived_conversations as
-- one document, in the same statement (so it is either archived and gone, or untouched).
WITH victims AS (
    SELECT c.id FROM {schema}.conversations c
    WHERE c.tenant_id = %(tenant)s AND c.status = %(status)s
      AND c.updated_at < now() - make_interval(secs => %(age)s)
    ORDER BY c.updated_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), archived AS (
    INSERT INTO {schema}.archived_conversations
        (tenant_id, id, app, framework, user_id, status, created_at, updated_at, document)
    SELECT c.tenant_id, c.id, c.app, c.framework, c.user_id, c.status, c.created_at, c.updated_at,
           jsonb_build_object(
               'format', 'pgagentstate.archive.v1',
               'conversation', jsonb_build_object(
                   'id', c.id, 'app', c.app, 'framework', c.framework, 'user_id', c.user_id,
                   'channel', c.channel, 'status', c.status, 'metadata', c.metadata, 'version', c.version,
                   'last_seq', c.last_seq, 'created_at', c.created_at, 'updated_at', c.updated_at),
               'events', coalesce((
                   SELECT jsonb_agg(jsonb_build_object(
                              'seq', e.seq, 'event_id', e.event_id, 'kind', e.kind, 'author', e.author,
                              'payload', e.payload, 'created_at', e.created_at) ORDER BY e.seq)
                   FROM {schema}.events e WHERE e.tenant_id = c.tenant_id AND e.conversation_id = c.id), '[]'),
               'state_versions', coalesce((
                   SELECT jsonb_agg(jsonb_build_object(
                              'name', h.name, 'version', h.version, 'data', h.data, 'changed_at', h.changed_at)
                              ORDER BY h.name, h.version)
                   FROM {schema}.state_changes h
                   WHERE h.tenant_id = c.tenant_id AND h.scope = 'conversation' AND h.app = ''
                     AND h.subject = c.id), '[]'),
               'steps', coalesce((
                   SELECT jsonb_agg(jsonb_build_object(
                              'workflow', s.workflow, 'step', s.step, 'position', s.position, 'status', s.status,
                              'attempts', s.attempts, 'last_error', s.last_error, 'result', s.result,
                              'started_at', s.started_at, 'completed_at', s.completed_at)
                              ORDER BY s.workflow, s.position, s.step)
                   FROM {schema}.workflow_steps s WHERE s.tenant_id = c.tenant_id AND s.conversation_id = c.id),
                   '[]'),
               'ledger', coalesce((
                   SELECT jsonb_agg(jsonb_build_object(
                              'key', k.key, 'api', k.api, 'status', k.status, 'result', k.result,
                              'error', k.error, 'attempts', k.attempts, 'duplicate_hits', k.duplicate_hits,
                              'created_at', k.created_at, 'completed_at', k.completed_at) ORDER BY k.created_at)
                   FROM {schema}.idempotency_keys k WHERE k.tenant_id = c.tenant_id AND k.conversation_id = c.id),
                   '[]'))
    FROM {schema}.conversations c JOIN victims v ON c.tenant_id = %(tenant)s AND c.id = v.id
    RETURNING id
), gone AS (
    DELETE FROM {schema}.conversations c USING archived a
    WHERE c.tenant_id = %(tenant)s AND c.id = a.id
    RETURNING c.id
), docs AS (
    DELETE FROM {schema}.state_documents d USING gone g
    WHERE d.tenant_id = %(tenant)s AND d.scope = 'conversation' AND d.app = '' AND d.subject = g.id
), changes AS (
    DELETE FROM {schema}.state_changes h USING gone g
    WHERE h.tenant_id = %(tenant)s AND h.scope = 'conversation' AND h.app = '' AND h.subject = g.id
)
SELECT count(*) FROM gone

-- name: ops_gc_abandon_count
SELECT count(*) FROM {schema}.conversations c
WHERE c.tenant_id = %(tenant)s AND c.status IN ('active', 'waiting_customer', 'awaiting_approval')
  AND c.updated_at < now() - make_interval(secs => %(age)s)

-- name: ops_gc_abandon
-- Marks idle open conversations abandoned (a status change: version and updated_at move, as for any
-- update, so the abandoned retention period counts from here).
WITH victims AS (
    SELECT c.id FROM {schema}.conversations c
    WHERE c.tenant_id = %(tenant)s AND c.status IN ('active', 'waiting_customer', 'awaiting_approval')
      AND c.updated_at < now() - make_interval(secs => %(age)s)
    ORDER BY c.updated_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE {schema}.conversations c
SET status = 'abandoned', version = c.version + 1, updated_at = now()
FROM victims v
WHERE c.tenant_id = %(tenant)s AND c.id = v.id

-- name: ops_gc_snapshot_candidates
-- Conversations (after %(after)s in id order) with a namespace holding more than one checkpoint and no
-- checkpoint newer than %(age)s seconds: their history can be compacted to the newest checkpoint.
SELECT c.id FROM {schema}.conversations c
WHERE c.tenant_id = %(tenant)s AND c.id > %(after)s
  AND EXISTS (SELECT 1 FROM {schema}.snapshots s
              WHERE s.tenant_id = c.tenant_id AND s.conversation_id = c.id
              GROUP BY s.namespace HAVING count(*) > 1)
  AND NOT EXISTS (SELECT 1 FROM {schema}.snapshots s
                  WHERE s.tenant_id = c.tenant_id AND s.conversation_id = c.id
                    AND s.created_at >= now() - make_interval(secs => %(age)s))
ORDER BY c.id
LIMIT %(limit)s

-- name: ops_gc_snapshot_count
-- How many checkpoints are not the newest of their namespace, in conversations ops_gc_snapshot_candidates
-- would pick (an upper bound: checkpoints that a delta channel is rebuilt from are kept).
SELECT count(*) FROM (
    SELECT s.conversation_id, s.namespace, s.snapshot_id,
           row_number() OVER (PARTITION BY s.conversation_id, s.namespace ORDER BY s.snapshot_id DESC) AS rn,
           max(s.created_at) OVER (PARTITION BY s.conversation_id) AS newest
    FROM {schema}.snapshots s
    WHERE s.tenant_id = %(tenant)s
) x
WHERE x.rn > 1 AND x.newest < now() - make_interval(secs => %(age)s)

-- name: ops_snapshot_rows
SELECT count(*) FROM {schema}.snapshots s
WHERE s.tenant_id = %(tenant)s AND s.conversation_id = ANY(%(conversation_ids)s::text[])

-- name: ops_gc_ledger_count
SELECT count(*) FROM {schema}.idempotency_keys k
WHERE k.tenant_id = %(tenant)s AND k.status IN ('succeeded', 'failed')
  AND k.updated_at < now() - make_interval(secs => %(age)s)

-- name: ops_gc_ledger
-- Finished ledger entries older than %(age)s seconds. A retry of such a side effect after this would run
-- it again, so keep them longer than any client retries.
WITH victims AS (
    SELECT k.key FROM {schema}.idempotency_keys k
    WHERE k.tenant_id = %(tenant)s AND k.status IN ('succeeded', 'failed')
      AND k.updated_at < now() - make_interval(secs => %(age)s)
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
DELETE FROM {schema}.idempotency_keys k USING victims v
WHERE k.tenant_id = %(tenant)s AND k.key = v.key

-- name: ops_gc_archive_count
SELECT count(*) FROM {schema}.archived_conversations a
WHERE a.tenant_id = %(tenant)s AND a.archived_at < now() - make_interval(secs => %(age)s)

-- name: ops_gc_archive_purge
WITH victims AS (
    SELECT a.id, a.archived_at FROM {schema}.archived_conversations a
    WHERE a.tenant_id = %(tenant)s AND a.archived_at < now() - make_interval(secs => %(age)s)
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
DELETE FROM {schema}.archived_conversations a USING victims v
WHERE a.tenant_id = %(tenant)s AND a.id = v.id AND a.archived_at = v.archived_at

-- ---------------------------------------------------------------------------------------------------
-- Export and erase of one user: conversations with their user_id (and everything in them), user-scope
-- state documents, memories with their user_id, the ledger entries of their conversations, and their
-- archived conversations. Export runs in one REPEATABLE READ snapshot.

-- name: ops_user_conversations
SELECT c.tenant_id, c.id, c.app, c.framework, c.user_id, c.channel, c.status, c.metadata::text,
       c.version, c.last_seq, c.created_at, c.updated_at
FROM {schema}.conversations c
WHERE c.tenant_id = %(tenant)s AND c.user_id = %(user_id)s AND c.user_id <> ''
ORDER BY c.created_at, c.id

-- name: ops_user_events
SELECT e.conversation_id, e.seq, e.event_id, e.kind, e.author, e.payload::text, e.created_at
FROM {schema}.events e
JOIN {schema}.conversations c ON c.tenant_id = e.tenant_id AND c.id = e.conversation_id
WHERE c.tenant_id = %(tenant)s AND c.user_id = %(user_id)s AND c.user_id <> ''
ORDER BY e.conversation_id, e.seq

-- name: ops_user_state_versions
-- Every version of the state documents of the user's conversations and of the user's own documents.
SELECT h.scope, h.app, h.subject, h.name, h.version, h.data::text, h.changed_at
FROM {schema}.state_changes h
WHERE h.tenant_id = %(tenant)s AND (
      (h.scope = 'conversation' AND h.app = '' AND h.subject IN (
           SELECT c.id FROM {schema}.conversations c
           WHERE c.tenant_id = %(tenant)s AND c.user_id = %(user_id)s AND c.user_id <> ''))
   OR (h.scope = 'user' AND h.subject = %(user_id)s))
ORDER BY h.scope, h.app, h.subject, h.name, h.version

-- name: ops_user_steps
SELECT s.conversation_id, s.workflow, s.step, s.position, s.status, s.attempts, s.last_error, s.result::text,
       s.started_at, s.completed_at, s.updated_at, s.lease_expires_at
FROM {schema}.workflow_steps s
JOIN {schema}.conversations c ON c.tenant_id = s.tenant_id AND c.id = s.conversation_id
WHERE c.tenant_id = %(tenant)s AND c.user_id = %(user_id)s AND c.user_id <> ''
ORDER BY s.conversation_id, s.workflow, s.position, s.step

-- name: ops_user_scratch
SELECT s.conversation_id, s.key, s.value::text, s.expires_at, s.updated_at
FROM {schema}.scratchpad s
JOIN {schema}.conversations c ON c.tenant_id = s.tenant_id AND c.id = s.conversation_id
WHERE c.tenant_id = %(tenant)s AND c.user_id = %(user_id)s AND c.user_id <> ''
ORDER BY s.conversation_id, s.key

-- name: ops_user_ledger
SELECT k.key, k.conversation_id, k.api, k.request_hash, k.status, k.result::text, k.error, k.owner, k.attempts,
       k.duplicate_hits, k.lease_expires_at, k.created_at, k.updated_at, k.completed_at, k.request::text
FROM {schema}.idempotency_keys k
WHERE k.tenant_id = %(tenant)s AND k.conversation_id IN (
    SELECT c.id FROM {schema}.conversations c
    WHERE c.tenant_id = %(tenant)s AND c.user_id = %(user_id)s AND c.user_id <> ''
    UNION
    SELECT a.id FROM {schema}.archived_conversations a
    WHERE a.tenant_id = %(tenant)s AND a.user_id = %(user_id)s AND a.user_id <> '')
ORDER BY k.created_at, k.key

-- name: ops_user_memories
SELECT m.namespace, m.key, m.value::text, m.user_id, m.version, m.created_at, m.updated_at, m.expires_at
FROM {schema}.memories m
WHERE m.tenant_id = %(tenant)s AND m.user_id = %(user_id)s AND m.user_id <> ''
ORDER BY m.ns_path, m.key

-- name: ops_user_snapshots
-- Checkpoints are framework-serialised bytes; exported as base64 with their blobs, chunks and writes.
SELECT s.conversation_id, s.namespace, s.snapshot_id, s.parent_id, s.run_id, s.type,
       encode(s.data, 'base64'), s.metadata::text, s.channel_versions::text, s.created_at, s.forked
FROM {schema}.snapshots s
JOIN {schema}.conversations c ON c.tenant_id = s.tenant_id AND c.id = s.conversation_id
WHERE c.tenant_id = %(tenant)s AND c.user_id = %(user_id)s AND c.user_id <> ''
ORDER BY s.conversation_id, s.namespace, s.snapshot_id

-- name: ops_user_snapshot_blobs
SELECT b.conversation_id, b.namespace, b.channel, b.version, b.type, b.chunks, b.base
FROM {schema}.snapshot_blobs b
JOIN {schema}.conversations c ON c.tenant_id = b.tenant_id AND c.id = b.conversation_id
WHERE c.tenant_id = %(tenant)s AND c.user_id = %(user_id)s AND c.user_id <> ''
ORDER BY b.conversation_id, b.namespace, b.channel, b.version

-- name: ops_user_snapshot_chunks
SELECT k.conversation_id, k.hash, encode(k.data, 'base64')
FROM {schema}.snapshot_chunks k
JOIN {schema}.conversations c ON c.tenant_id = k.tenant_id AND c.id = k.conversation_id
WHERE c.tenant_id = %(tenant)s AND c.user_id = %(user_id)s AND c.user_id <> ''
ORDER BY k.conversation_id, k.hash

-- name: ops_user_snapshot_writes
SELECT w.conversation_id, w.namespace, w.snapshot_id, w.task_id, w.idx, w.channel, w.type,
       encode(w.data, 'base64'), w.task_path
FROM {schema}.snapshot_writes w
JOIN {schema}.conversations c ON c.tenant_id = w.tenant_id AND c.id = w.conversation_id
WHERE c.tenant_id = %(tenant)s AND c.user_id = %(user_id)s AND c.user_id <> ''
ORDER BY w.conversation_id, w.namespace, w.snapshot_id, w.task_id, w.idx

-- name: ops_user_archived
SELECT a.id, a.archived_at, a.document::text
FROM {schema}.archived_conversations a
WHERE a.tenant_id = %(tenant)s AND a.user_id = %(user_id)s AND a.user_id <> ''
ORDER BY a.archived_at, a.id

-- name: ops_erase_lock
-- First statement of an erase: locks the user's conversations (a turn in flight finishes first, and no
-- turn can commit into them until the erase does).
SELECT c.id FROM {schema}.conversations c
WHERE c.tenant_id = %(tenant)s AND c.user_id = %(user_id)s AND c.user_id <> ''
ORDER BY c.id
FOR UPDATE

-- name: ops_erase_ledger
-- The ledger entries of the user's live and archived conversations (runs before the archive goes).
DELETE FROM {schema}.idempotency_keys k
WHERE k.tenant_id = %(tenant)s AND (k.conversation_id = ANY(%(conversation_ids)s::text[]) OR k.conversation_id IN (
    SELECT a.id FROM {schema}.archived_conversations a
    WHERE a.tenant_id = %(tenant)s AND a.user_id = %(user_id)s AND a.user_id <> ''))

-- name: ops_erase_conversation_states
WITH d AS (
    DELETE FROM {schema}.state_documents d
    WHERE d.tenant_id = %(tenant)s AND d.scope = 'conversation' AND d.app = ''
      AND d.subject = ANY(%(conversation_ids)s::text[])
)
DELETE FROM {schema}.state_changes h
WHERE h.tenant_id = %(tenant)s AND h.scope = 'conversation' AND h.app = ''
  AND h.subject = ANY(%(conversation_ids)s::text[])

-- name: ops_erase_user_states
WITH d AS (
    DELETE FROM {schema}.state_documents d
    WHERE d.tenant_id = %(tenant)s AND d.scope = 'user' AND d.subject = %(user_id)s
)
DELETE FROM {schema}.state_changes h
WHERE h.tenant_id = %(tenant)s AND h.scope = 'user' AND h.subject = %(user_id)s

-- name: ops_erase_memories
DELETE FROM {schema}.memories m
WHERE m.tenant_id = %(tenant)s AND m.user_id = %(user_id)s AND m.user_id <> ''

-- name: ops_erase_archived
DELETE FROM {schema}.archived_conversations a
WHERE a.tenant_id = %(tenant)s AND a.user_id = %(user_id)s AND a.user_id <> ''

-- name: ops_erase_tombstones
DELETE FROM {schema}.snapshot_tombstones t
WHERE t.tenant_id = %(tenant)s AND t.conversation_id = ANY(%(conversation_ids)s::text[])

-- name: ops_erase_conversations
-- Last: events, steps, scratchpad and checkpoints cascade with the conversations.
DELETE FROM {schema}.conversations c
WHERE c.tenant_id = %(tenant)s AND c.id = ANY(%(conversation_ids)s::text[])

-- name: ops_erase_counts
-- What an erase removes: the rows it would delete, counted without deleting (dry run). Events, steps,
-- scratchpad rows and checkpoints of the conversations go with them.
SELECT
    (SELECT count(*) FROM {schema}.conversations c
     WHERE c.tenant_id = %(tenant)s AND c.user_id = %(user_id)s AND c.user_id <> ''),
    (SELECT count(*) FROM {schema}.events e JOIN {schema}.conversations c
         ON c.tenant_id = e.tenant_id AND c.id = e.conversation_id
     WHERE c.tenant_id = %(tenant)s AND c.user_id = %(user_id)s AND c.user_id <> ''),
    (SELECT count(*) FROM {schema}.state_changes h
     WHERE h.tenant_id = %(tenant)s AND ((h.scope = 'user' AND h.subject = %(user_id)s)
        OR (h.scope = 'conversation' AND h.app = '' AND h.subject IN (
            SELECT c.id FROM {schema}.conversations c
            WHERE c.tenant_id = %(tenant)s AND c.user_id = %(user_id)s AND c.user_id <> '')))),
    (SELECT count(*) FROM {schema}.memories m
     WHERE m.tenant_id = %(tenant)s AND m.user_id = %(user_id)s AND m.user_id <> ''),
    (SELECT count(*) FROM {schema}.idempotency_keys k
     WHERE k.tenant_id = %(tenant)s AND k.conversation_id IN (
         SELECT c.id FROM {schema}.conversations c
         WHERE c.tenant_id = %(tenant)s AND c.user_id = %(user_id)s AND c.user_id <> ''
         UNION
         SELECT a.id FROM {schema}.archived_conversations a
         WHERE a.tenant_id = %(tenant)s AND a.user_id = %(user_id)s AND a.user_id <> '')),
    (SELECT count(*) FROM {schema}.archived_conversations a
     WHERE a.tenant_id = %(tenant)s AND a.user_id = %(user_id)s AND a.user_id <> '')

-- ---------------------------------------------------------------------------------------------------
-- Statistics: the tenant's rows and what the store has had to retry, plus cheap catalog counters.

-- name: ops_stats_tenant
SELECT
    (SELECT count(*) FROM {schema}.conversations c WHERE c.tenant_id = %(tenant)s),
    (SELECT coalesce(sum(c.last_seq), 0)::bigint FROM {schema}.conversations c WHERE c.tenant_id = %(tenant)s),
    (SELECT count(*) FROM {schema}.state_changes h WHERE h.tenant_id = %(tenant)s),
    (SELECT count(*) FROM {schema}.workflow_steps s WHERE s.tenant_id = %(tenant)s),
    (SELECT coalesce(sum(s.attempts - 1) FILTER (WHERE s.attempts > 1), 0)::bigint
     FROM {schema}.workflow_steps s WHERE s.tenant_id = %(tenant)s),
    (SELECT count(*) FROM {schema}.idempotency_keys k WHERE k.tenant_id = %(tenant)s),
    (SELECT coalesce(sum(k.attempts - 1) FILTER (WHERE k.attempts > 1), 0)::bigint
     FROM {schema}.idempotency_keys k WHERE k.tenant_id = %(tenant)s),
    (SELECT coalesce(sum(k.duplicate_hits), 0)::bigint FROM {schema}.idempotency_keys k
     WHERE k.tenant_id = %(tenant)s AND k.duplicate_hits > 0),
    (SELECT count(*) FROM {schema}.memories m WHERE m.tenant_id = %(tenant)s),
    (SELECT count(*) FROM {schema}.snapshots s WHERE s.tenant_id = %(tenant)s),
    (SELECT count(*) FROM {schema}.archived_conversations a WHERE a.tenant_id = %(tenant)s)

-- name: ops_stats_tables
-- Per table of the schema (all tenants): estimated rows, size with indexes and TOAST, and the server's
-- cumulative counters since its statistics were last reset.
SELECT c.relname, greatest(c.reltuples, 0)::bigint, pg_total_relation_size(c.oid),
       coalesce(s.n_live_tup, 0), coalesce(s.n_dead_tup, 0),
       coalesce(s.n_tup_ins, 0), coalesce(s.n_tup_upd, 0), coalesce(s.n_tup_hot_upd, 0), coalesce(s.n_tup_del, 0),
       coalesce(s.seq_scan, 0), coalesce(s.idx_scan, 0), greatest(s.last_autovacuum, s.last_vacuum)
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
WHERE n.nspname = %(schema_name)s AND c.relkind IN ('r', 'p')
ORDER BY pg_total_relation_size(c.oid) DESC, c.relname

-- name: ops_stats_database
-- Database-wide transaction counters: a rising rollback share means conflicts (failed compare-and-swap,
-- lock timeouts) or errors; deadlocks should stay at 0.
SELECT d.xact_commit, d.xact_rollback, d.deadlocks, d.conflicts, d.stats_reset
FROM pg_stat_database d WHERE d.datname = current_database()

-- ---------------------------------------------------------------------------------------------------
-- doctor

-- name: ops_doctor_server
SELECT current_setting('server_version'), current_setting('server_version_num')::int, current_database(),
       current_user, r.rolsuper, r.rolbypassrls,
       current_setting('max_connections')::int,
       (SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()),
       current_setting('statement_timeout'), current_setting('idle_in_transaction_session_timeout'),
       current_setting('lock_timeout'), current_setting('default_transaction_isolation'),
       (SELECT l.ssl FROM pg_stat_ssl l WHERE l.pid = pg_backend_pid()), inet_server_port(), clock_timestamp()
FROM pg_roles r WHERE r.rolname = current_user

-- name: ops_doctor_rls
-- Row-level security per table of the schema, and whether it binds the current role (owners and roles with
-- BYPASSRLS are not bound unless FORCE ROW LEVEL SECURITY is set).
SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity, pg_get_userbyid(c.relowner),
       pg_has_role(current_user, c.relowner, 'MEMBER'),
       (SELECT count(*) FROM pg_policies p WHERE p.schemaname = n.nspname AND p.tablename = c.relname)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = %(schema_name)s AND c.relkind = 'r' AND c.relname <> 'migrations'
ORDER BY c.relname

-- name: ops_doctor_encryption
-- A sample of the tenant's event payloads: how many are ciphertexts (JSON strings starting with the
-- envelope marker of pgagentstate.crypto).
SELECT count(*) FILTER (WHERE jsonb_typeof(x.payload) = 'string' AND starts_with(x.payload #>> '{}', %(marker)s)),
       count(*)
FROM (SELECT e.payload FROM {schema}.events e WHERE e.tenant_id = %(tenant)s LIMIT %(limit)s) x
