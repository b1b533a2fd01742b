-- One conversation's timeline and time travel (ops/operations/timeline.py), scoped by %(tenant)s.

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
       {schema}.id_text((array_agg(s.snapshot_id ORDER BY s.snapshot_id DESC))[1])
FROM {schema}.snapshots s
WHERE s.tenant_id = %(tenant)s AND s.conversation_id = %(conversation_id)s
GROUP BY s.namespace
ORDER BY s.namespace

-- name: ops_timeline_events
-- events_list plus when the store wrote each event (recorded_at; created_at for events from before
-- migration 0014): the timeline orders by it, as the steps, calls and state versions carry the store's time.
SELECT * FROM (
    SELECT e.conversation_id, e.seq, e.event_id, e.kind, e.author, e.payload::text, e.created_at,
           coalesce(e.recorded_at, e.created_at) AS recorded_at
    FROM {schema}.events e
    WHERE e.tenant_id = %(tenant)s AND e.conversation_id = %(conversation_id)s
    ORDER BY e.seq DESC
    LIMIT %(limit)s
) newest
ORDER BY seq

-- name: ops_shared_state
-- The state documents a conversation shares with others of its app: its user's (scope 'user') and its
-- app's (scope 'app'), as ADK's `user:` and `app:` keys are stored. Latest version only.
SELECT d.scope, d.name, d.version, d.data::text, d.updated_at, d.subject, d.app
FROM {schema}.conversations c
JOIN {schema}.state_documents d ON d.tenant_id = c.tenant_id AND d.app = c.app
WHERE c.tenant_id = %(tenant)s AND c.id = %(conversation_id)s
  AND ((d.scope = 'user' AND c.user_id <> '' AND d.subject = c.user_id)
       OR (d.scope = 'app' AND c.app <> '' AND d.subject = ''))
ORDER BY d.scope DESC, d.name

-- name: ops_retries
-- Attempts of this conversation's steps and calls that did not finish before another started.
SELECT 'step', s.workflow || '/' || s.step, s.retries::text
FROM {schema}.workflow_steps s
WHERE s.tenant_id = %(tenant)s AND s.conversation_id = %(conversation_id)s AND s.retries IS NOT NULL
UNION ALL
SELECT 'call', k.key, k.retries::text
FROM {schema}.idempotency_keys k
WHERE k.tenant_id = %(tenant)s AND k.conversation_id = %(conversation_id)s AND k.retries IS NOT NULL
