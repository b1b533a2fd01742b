-- Retention, `gc` (ops/operations/retention.py). Each batch locks its rows with SKIP LOCKED (a turn
-- holding a conversation is not waited for, and two collectors never take the same rows) and
-- re-checks the condition on the locked version. Scoped by %(tenant)s.

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

-- name: ops_gc_inbox_count
SELECT count(*) FROM {schema}.inbox_messages m
WHERE m.tenant_id = %(tenant)s AND m.status IN ('done', 'failed')
  AND m.finished_at < now() - make_interval(secs => %(age)s)

-- name: ops_gc_inbox
-- Finished inbox messages older than %(age)s seconds. Only messages at or before their conversation's
-- done_seq are finished, so the queue's counters stay as they are.
WITH victims AS (
    SELECT m.conversation_id, m.seq FROM {schema}.inbox_messages m
    WHERE m.tenant_id = %(tenant)s AND m.status IN ('done', 'failed')
      AND m.finished_at < now() - make_interval(secs => %(age)s)
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
DELETE FROM {schema}.inbox_messages m USING victims v
WHERE m.tenant_id = %(tenant)s AND m.conversation_id = v.conversation_id AND m.seq = v.seq
