-- Conversation health (ops/operations/health.py), scoped by %(tenant)s.
-- "Open" conversations are active, waiting_customer and awaiting_approval; an open conversation
-- without activity for %(idle)s seconds counts as abandoned.

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
