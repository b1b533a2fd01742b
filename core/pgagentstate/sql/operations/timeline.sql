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
       (array_agg(s.snapshot_id ORDER BY s.snapshot_id DESC))[1]
FROM {schema}.snapshots s
WHERE s.tenant_id = %(tenant)s AND s.conversation_id = %(conversation_id)s
GROUP BY s.namespace
ORDER BY s.namespace
