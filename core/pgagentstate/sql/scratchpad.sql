-- The short-term scratchpad of a conversation.

-- name: scratch_put
INSERT INTO {schema}.scratchpad AS s (tenant_id, conversation_id, key, value, expires_at, updated_at)
VALUES (%(tenant)s, %(conversation_id)s, %(key)s, %(value)s::jsonb,
        now() + make_interval(secs => %(ttl)s), now())
ON CONFLICT (tenant_id, conversation_id, key) DO UPDATE
SET value = EXCLUDED.value, expires_at = EXCLUDED.expires_at, updated_at = now()

-- name: scratch_list
SELECT s.key, s.value::text FROM {schema}.scratchpad s
WHERE s.tenant_id = %(tenant)s AND s.conversation_id = %(conversation_id)s
  AND (%(key)s::text IS NULL OR s.key = %(key)s)
  AND (s.expires_at IS NULL OR s.expires_at > now())
ORDER BY s.key

-- name: scratch_delete
DELETE FROM {schema}.scratchpad s
WHERE s.tenant_id = %(tenant)s AND s.conversation_id = %(conversation_id)s AND s.key = %(key)s
  AND (s.expires_at IS NULL OR s.expires_at > now())
