-- Export and erase of one user (ops/operations/privacy.py): conversations with their user_id (and
-- everything in them), user-scope state documents, memories with their user_id, the ledger
-- entries of their conversations, and their archived conversations. Export runs in one
-- REPEATABLE READ snapshot. Scoped by %(tenant)s.

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

-- name: ops_user_inbox
-- The durable inbox's messages of the user's conversations (columns as in sql/inbox.sql).
SELECT m.conversation_id, m.seq, m.delivery_id, m.request_hash, m.message::text, m.status, m.attempts, m.worker,
       m.result::text, m.error, m.accepted_at, m.started_at, m.finished_at
FROM {schema}.inbox_messages m
JOIN {schema}.conversations c ON c.tenant_id = m.tenant_id AND c.id = m.conversation_id
WHERE c.tenant_id = %(tenant)s AND c.user_id = %(user_id)s AND c.user_id <> ''
ORDER BY m.conversation_id, m.seq

-- name: ops_user_memories
SELECT m.namespace, m.key, m.value::text, m.user_id, m.version, m.created_at, m.updated_at, m.expires_at
FROM {schema}.memories m
WHERE m.tenant_id = %(tenant)s AND m.user_id = %(user_id)s AND m.user_id <> ''
ORDER BY m.ns_path, m.key

-- name: ops_user_snapshots
-- Checkpoints are framework-serialised bytes; exported as base64 with their blobs, chunks and writes.
SELECT s.conversation_id, s.namespace, {schema}.id_text(s.snapshot_id), {schema}.id_text(s.parent_id), s.run_id, s.type,
       encode(s.data, 'base64'), s.metadata::text, s.channel_versions::text, s.created_at, s.forked
FROM {schema}.snapshots s
JOIN {schema}.conversations c ON c.tenant_id = s.tenant_id AND c.id = s.conversation_id
WHERE c.tenant_id = %(tenant)s AND c.user_id = %(user_id)s AND c.user_id <> ''
ORDER BY s.conversation_id, s.namespace, s.snapshot_id

-- name: ops_user_snapshot_blobs
SELECT b.conversation_id, b.namespace, b.channel, b.version, b.type,
       ARRAY(SELECT {schema}.hash_text(h) FROM {schema}.hash_split(b.chunks) AS h), b.base
FROM {schema}.snapshot_blobs b
JOIN {schema}.conversations c ON c.tenant_id = b.tenant_id AND c.id = b.conversation_id
WHERE c.tenant_id = %(tenant)s AND c.user_id = %(user_id)s AND c.user_id <> ''
ORDER BY b.conversation_id, b.namespace, b.channel, b.version

-- name: ops_user_snapshot_chunks
SELECT k.conversation_id, {schema}.hash_text(k.hash), encode(k.data, 'base64')
FROM {schema}.snapshot_chunks k
JOIN {schema}.conversations c ON c.tenant_id = k.tenant_id AND c.id = k.conversation_id
WHERE c.tenant_id = %(tenant)s AND c.user_id = %(user_id)s AND c.user_id <> ''
ORDER BY k.conversation_id, k.hash

-- name: ops_user_snapshot_writes
SELECT w.conversation_id, w.namespace, {schema}.id_text(w.snapshot_id), {schema}.id_text(w.task_id), w.idx, w.channel,
       w.type,
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
