-- Distillation (see pgagentstate.distill and pgagentstate.ops.distill).

-- name: distill_plan
-- A conversation's owner and log position, and how far it was distilled.
SELECT c.user_id, c.app, c.framework, c.last_seq, coalesce(w.seq, 0)
FROM {schema}.conversations c
LEFT JOIN {schema}.distill_watermarks w ON w.tenant_id = c.tenant_id AND w.conversation_id = c.id
WHERE c.tenant_id = %(tenant)s AND c.id = %(conversation_id)s

-- name: distill_advance
-- Move the watermark from %(expected)s to %(seq)s, or do nothing (another worker moved it): the facts
-- are written in the same transaction only when this returns a row.
INSERT INTO {schema}.distill_watermarks AS w (tenant_id, conversation_id, seq, facts)
SELECT %(tenant)s, %(conversation_id)s, %(seq)s, %(facts)s
WHERE %(expected)s = 0
   OR EXISTS (SELECT 1 FROM {schema}.distill_watermarks x
              WHERE x.tenant_id = %(tenant)s AND x.conversation_id = %(conversation_id)s)
ON CONFLICT (tenant_id, conversation_id) DO UPDATE
SET seq = EXCLUDED.seq, facts = w.facts + EXCLUDED.facts, updated_at = now()
WHERE w.seq = %(expected)s
RETURNING w.seq

-- name: distill_pending
-- Conversations with events past their watermark, least recently distilled first.
SELECT c.id
FROM {schema}.conversations c
LEFT JOIN {schema}.distill_watermarks w ON w.tenant_id = c.tenant_id AND w.conversation_id = c.id
WHERE c.tenant_id = %(tenant)s AND c.last_seq > coalesce(w.seq, 0)
ORDER BY w.updated_at NULLS FIRST, c.id
LIMIT %(limit)s

-- name: distill_notify
SELECT pg_notify(%(channel)s, %(tenant)s || ':' || %(conversation_id)s)
