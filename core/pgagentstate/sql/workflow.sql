-- Durable workflow steps. Columns returned: conversation_id, workflow, step, position, status, attempts,
-- last_error, result, started_at, completed_at, updated_at, lease_expires_at

-- name: step_start
-- A completed step is never restarted (the WHERE leaves it untouched and no row comes back).
INSERT INTO {schema}.workflow_steps AS s
    (tenant_id, conversation_id, workflow, step, position, status, attempts, started_at, updated_at, lease_expires_at)
VALUES (%(tenant)s, %(conversation_id)s, %(workflow)s, %(step)s, %(position)s, 'in_progress', 1, now(), now(),
        now() + make_interval(secs => %(lease)s))
ON CONFLICT (tenant_id, conversation_id, workflow, step) DO UPDATE
SET status = 'in_progress', attempts = s.attempts + 1, updated_at = now(),
    started_at = coalesce(s.started_at, now()), lease_expires_at = EXCLUDED.lease_expires_at,
    -- An attempt that did not finish (it failed, or its worker died holding the lease), for the operators'
    -- timeline: newest 20, written only on a restart.
    retries = CASE WHEN s.status NOT IN ('in_progress', 'failed') OR s.attempts = 0 THEN s.retries
                   ELSE (CASE WHEN jsonb_array_length(coalesce(s.retries, '[]')) >= 20 THEN s.retries - 0
                              ELSE coalesce(s.retries, '[]') END)
                        || jsonb_build_array(jsonb_build_object('at', now(), 'status', s.status,
                                                                'error', CASE WHEN s.status = 'failed' THEN s.last_error END,
                                                                'lease_expires_at', s.lease_expires_at)) END
WHERE s.status <> 'completed'
RETURNING s.conversation_id, s.workflow, s.step, s.position, s.status, s.attempts, s.last_error, s.result::text,
          s.started_at, s.completed_at, s.updated_at, s.lease_expires_at

-- name: step_set
-- Records an outcome. %(result)s / %(error)s are written only when given.
INSERT INTO {schema}.workflow_steps AS s
    (tenant_id, conversation_id, workflow, step, position, status, attempts, last_error, result, started_at,
     completed_at, updated_at)
VALUES (%(tenant)s, %(conversation_id)s, %(workflow)s, %(step)s, %(position)s, %(status)s, 0, %(error)s,
        %(result)s::jsonb, NULL, CASE WHEN %(status)s = 'completed' THEN now() END, now())
ON CONFLICT (tenant_id, conversation_id, workflow, step) DO UPDATE
SET status = EXCLUDED.status,
    last_error = coalesce(EXCLUDED.last_error, s.last_error),
    result = coalesce(EXCLUDED.result, s.result),
    completed_at = CASE WHEN EXCLUDED.status = 'completed' THEN now() ELSE s.completed_at END,
    lease_expires_at = NULL,
    updated_at = now()
RETURNING s.conversation_id, s.workflow, s.step, s.position, s.status, s.attempts, s.last_error, s.result::text,
          s.started_at, s.completed_at, s.updated_at, s.lease_expires_at

-- name: step_list
SELECT s.conversation_id, s.workflow, s.step, s.position, s.status, s.attempts, s.last_error, s.result::text,
       s.started_at, s.completed_at, s.updated_at, s.lease_expires_at
FROM {schema}.workflow_steps s
WHERE s.tenant_id = %(tenant)s AND s.conversation_id = %(conversation_id)s
  AND (%(workflow)s::text IS NULL OR s.workflow = %(workflow)s)
  AND (%(step)s::text IS NULL OR s.step = %(step)s)
ORDER BY s.workflow, s.position, s.started_at NULLS LAST, s.step
