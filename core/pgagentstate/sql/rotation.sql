-- Key rotation: pages of every column that can hold ciphertexts, in primary-key order (keyset pagination
-- by a row comparison on the real key columns: %(first)s starts, then after the last row's key k0, k1, ...),
-- and a compare-and-swap write back: a value changed meanwhile is left for the next run.
-- %(tenant)s NULL means every tenant (the owner role runs rotation; RLS does not bind it).
-- Each page returns: the primary key (tenant_id first), the other columns the associated data needs, the
-- stored value (as text) last.

-- name: rot_events_page
SELECT e.tenant_id, e.conversation_id, e.seq, e.event_id, e.kind, e.author, e.payload::text
FROM {schema}.events e
WHERE (%(tenant)s::text IS NULL OR e.tenant_id = %(tenant)s)
  AND (%(first)s OR (e.tenant_id, e.conversation_id, e.seq) > (%(k0)s::text, %(k1)s::text, %(k2)s::bigint))
ORDER BY e.tenant_id, e.conversation_id, e.seq
LIMIT %(limit)s

-- name: rot_events_set
UPDATE {schema}.events e SET payload = %(new)s::json
WHERE e.tenant_id = %(k0)s AND e.conversation_id = %(k1)s AND e.seq = %(k2)s::bigint AND e.payload::text = %(old)s

-- name: rot_state_documents_page
SELECT d.tenant_id, d.scope, d.app, d.subject, d.name, d.data::text
FROM {schema}.state_documents d
WHERE (%(tenant)s::text IS NULL OR d.tenant_id = %(tenant)s)
  AND (%(first)s OR (d.tenant_id, d.scope, d.app, d.subject, d.name)
                    > (%(k0)s::text, %(k1)s::text, %(k2)s::text, %(k3)s::text, %(k4)s::text))
ORDER BY d.tenant_id, d.scope, d.app, d.subject, d.name
LIMIT %(limit)s

-- name: rot_state_documents_set
UPDATE {schema}.state_documents d SET data = %(new)s::jsonb
WHERE d.tenant_id = %(k0)s AND d.scope = %(k1)s AND d.app = %(k2)s AND d.subject = %(k3)s AND d.name = %(k4)s
  AND d.data::text = %(old)s

-- name: rot_state_changes_page
SELECT d.tenant_id, d.scope, d.app, d.subject, d.name, d.version, d.data::text
FROM {schema}.state_changes d
WHERE (%(tenant)s::text IS NULL OR d.tenant_id = %(tenant)s)
  AND (%(first)s OR (d.tenant_id, d.scope, d.app, d.subject, d.name, d.version)
                    > (%(k0)s::text, %(k1)s::text, %(k2)s::text, %(k3)s::text, %(k4)s::text, %(k5)s::bigint))
ORDER BY d.tenant_id, d.scope, d.app, d.subject, d.name, d.version
LIMIT %(limit)s

-- name: rot_state_changes_set
UPDATE {schema}.state_changes d SET data = %(new)s::jsonb
WHERE d.tenant_id = %(k0)s AND d.scope = %(k1)s AND d.app = %(k2)s AND d.subject = %(k3)s AND d.name = %(k4)s
  AND d.version = %(k5)s::bigint AND d.data::text = %(old)s

-- name: rot_conversations_page
SELECT c.tenant_id, c.id, c.metadata::text
FROM {schema}.conversations c
WHERE (%(tenant)s::text IS NULL OR c.tenant_id = %(tenant)s)
  AND (%(first)s OR (c.tenant_id, c.id) > (%(k0)s::text, %(k1)s::text))
ORDER BY c.tenant_id, c.id
LIMIT %(limit)s

-- name: rot_conversations_set
UPDATE {schema}.conversations c SET metadata = %(new)s::jsonb
WHERE c.tenant_id = %(k0)s AND c.id = %(k1)s AND c.metadata::text = %(old)s

-- name: rot_memories_page
SELECT m.tenant_id, m.ns_path, m.key, m.value::text
FROM {schema}.memories m
WHERE (%(tenant)s::text IS NULL OR m.tenant_id = %(tenant)s)
  AND (%(first)s OR (m.tenant_id, m.ns_path, m.key) > (%(k0)s::text, %(k1)s::text, %(k2)s::text))
ORDER BY m.tenant_id, m.ns_path, m.key
LIMIT %(limit)s

-- name: rot_memories_set
-- The search terms of a value written in plaintext would give its words away once it is encrypted.
UPDATE {schema}.memories m SET value = %(new)s::jsonb, search = NULL
WHERE m.tenant_id = %(k0)s AND m.ns_path = %(k1)s AND m.key = %(k2)s AND m.value::text = %(old)s

-- name: rot_scratchpad_page
SELECT s.tenant_id, s.conversation_id, s.key, s.value::text
FROM {schema}.scratchpad s
WHERE (%(tenant)s::text IS NULL OR s.tenant_id = %(tenant)s)
  AND (%(first)s OR (s.tenant_id, s.conversation_id, s.key) > (%(k0)s::text, %(k1)s::text, %(k2)s::text))
ORDER BY s.tenant_id, s.conversation_id, s.key
LIMIT %(limit)s

-- name: rot_scratchpad_set
UPDATE {schema}.scratchpad s SET value = %(new)s::jsonb
WHERE s.tenant_id = %(k0)s AND s.conversation_id = %(k1)s AND s.key = %(k2)s AND s.value::text = %(old)s

-- name: rot_workflow_steps_page
SELECT s.tenant_id, s.conversation_id, s.workflow, s.step, s.result::text
FROM {schema}.workflow_steps s
WHERE (%(tenant)s::text IS NULL OR s.tenant_id = %(tenant)s) AND s.result IS NOT NULL
  AND (%(first)s OR (s.tenant_id, s.conversation_id, s.workflow, s.step)
                    > (%(k0)s::text, %(k1)s::text, %(k2)s::text, %(k3)s::text))
ORDER BY s.tenant_id, s.conversation_id, s.workflow, s.step
LIMIT %(limit)s

-- name: rot_workflow_steps_set
UPDATE {schema}.workflow_steps s SET result = %(new)s::jsonb
WHERE s.tenant_id = %(k0)s AND s.conversation_id = %(k1)s AND s.workflow = %(k2)s AND s.step = %(k3)s
  AND s.result::text = %(old)s

-- name: rot_ledger_result_page
SELECT k.tenant_id, k.key, k.result::text
FROM {schema}.idempotency_keys k
WHERE (%(tenant)s::text IS NULL OR k.tenant_id = %(tenant)s) AND k.result IS NOT NULL
  AND (%(first)s OR (k.tenant_id, k.key) > (%(k0)s::text, %(k1)s::text))
ORDER BY k.tenant_id, k.key
LIMIT %(limit)s

-- name: rot_ledger_result_set
UPDATE {schema}.idempotency_keys k SET result = %(new)s::jsonb
WHERE k.tenant_id = %(k0)s AND k.key = %(k1)s AND k.result::text = %(old)s

-- name: rot_ledger_request_page
SELECT k.tenant_id, k.key, k.api, k.request::text
FROM {schema}.idempotency_keys k
WHERE (%(tenant)s::text IS NULL OR k.tenant_id = %(tenant)s) AND k.request IS NOT NULL
  AND (%(first)s OR (k.tenant_id, k.key) > (%(k0)s::text, %(k1)s::text))
ORDER BY k.tenant_id, k.key
LIMIT %(limit)s

-- name: rot_ledger_request_set
UPDATE {schema}.idempotency_keys k SET request = %(new)s::jsonb, request_hash = %(hash)s
WHERE k.tenant_id = %(k0)s AND k.key = %(k1)s AND k.request::text = %(old)s

-- name: rot_ledger_error_page
-- The error column is text: paged and compared as a JSON string, so that it rotates like the others.
SELECT k.tenant_id, k.key, to_jsonb(k.error)::text
FROM {schema}.idempotency_keys k
WHERE (%(tenant)s::text IS NULL OR k.tenant_id = %(tenant)s) AND k.error IS NOT NULL
  AND (%(first)s OR (k.tenant_id, k.key) > (%(k0)s::text, %(k1)s::text))
ORDER BY k.tenant_id, k.key
LIMIT %(limit)s

-- name: rot_ledger_error_set
UPDATE {schema}.idempotency_keys k SET error = %(new)s::jsonb #>> '{}'
WHERE k.tenant_id = %(k0)s AND k.key = %(k1)s AND to_jsonb(k.error)::text = %(old)s
