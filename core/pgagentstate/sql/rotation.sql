-- Key rotation: pages of every column that can hold ciphertexts, in primary-key order (keyset
-- pagination), and a compare-and-swap write back: a value changed meanwhile is left for the next run.
-- %(tenant)s NULL means every tenant (the owner role runs rotation; RLS does not bind it).
-- Each page returns: tenant_id, the key columns (as text), the associated-data parts, the stored text.

-- name: rot_events_page
SELECT e.tenant_id, e.conversation_id, e.seq::text, e.event_id, e.payload::text
FROM {schema}.events e
WHERE (%(tenant)s::text IS NULL OR e.tenant_id = %(tenant)s)
  AND (e.tenant_id, e.conversation_id, e.seq) > (%(k1)s, %(k2)s, %(k3)s::bigint)
ORDER BY e.tenant_id, e.conversation_id, e.seq
LIMIT %(limit)s

-- name: rot_events_set
UPDATE {schema}.events e SET payload = %(new)s::jsonb
WHERE e.tenant_id = %(k1)s AND e.conversation_id = %(k2)s AND e.seq = %(k3)s::bigint AND e.payload::text = %(old)s

-- name: rot_state_documents_page
SELECT d.tenant_id, d.scope || chr(31) || d.app || chr(31) || d.subject || chr(31) || d.name, '', '', d.data::text
FROM {schema}.state_documents d
WHERE (%(tenant)s::text IS NULL OR d.tenant_id = %(tenant)s)
  AND (d.tenant_id, d.scope || chr(31) || d.app || chr(31) || d.subject || chr(31) || d.name) > (%(k1)s, %(k2)s)
ORDER BY d.tenant_id, d.scope || chr(31) || d.app || chr(31) || d.subject || chr(31) || d.name
LIMIT %(limit)s

-- name: rot_state_documents_set
UPDATE {schema}.state_documents d SET data = %(new)s::jsonb
WHERE d.tenant_id = %(k1)s AND d.scope || chr(31) || d.app || chr(31) || d.subject || chr(31) || d.name = %(k2)s
  AND d.data::text = %(old)s

-- name: rot_state_changes_page
SELECT d.tenant_id, d.scope || chr(31) || d.app || chr(31) || d.subject || chr(31) || d.name, d.version::text, '',
       d.data::text
FROM {schema}.state_changes d
WHERE (%(tenant)s::text IS NULL OR d.tenant_id = %(tenant)s)
  AND (d.tenant_id, d.scope || chr(31) || d.app || chr(31) || d.subject || chr(31) || d.name, d.version)
      > (%(k1)s, %(k2)s, %(k3)s::bigint)
ORDER BY d.tenant_id, d.scope || chr(31) || d.app || chr(31) || d.subject || chr(31) || d.name, d.version
LIMIT %(limit)s

-- name: rot_state_changes_set
UPDATE {schema}.state_changes d SET data = %(new)s::jsonb
WHERE d.tenant_id = %(k1)s AND d.scope || chr(31) || d.app || chr(31) || d.subject || chr(31) || d.name = %(k2)s
  AND d.version = %(k3)s::bigint AND d.data::text = %(old)s

-- name: rot_conversations_page
SELECT c.tenant_id, c.id, '', '', c.metadata::text
FROM {schema}.conversations c
WHERE (%(tenant)s::text IS NULL OR c.tenant_id = %(tenant)s) AND (c.tenant_id, c.id) > (%(k1)s, %(k2)s)
ORDER BY c.tenant_id, c.id
LIMIT %(limit)s

-- name: rot_conversations_set
UPDATE {schema}.conversations c SET metadata = %(new)s::jsonb
WHERE c.tenant_id = %(k1)s AND c.id = %(k2)s AND c.metadata::text = %(old)s

-- name: rot_memories_page
SELECT m.tenant_id, m.ns_path, m.key, '', m.value::text
FROM {schema}.memories m
WHERE (%(tenant)s::text IS NULL OR m.tenant_id = %(tenant)s) AND (m.tenant_id, m.ns_path, m.key) > (%(k1)s, %(k2)s, %(k3)s)
ORDER BY m.tenant_id, m.ns_path, m.key
LIMIT %(limit)s

-- name: rot_memories_set
-- The search terms of a value written in plaintext would give its words away once it is encrypted.
UPDATE {schema}.memories m SET value = %(new)s::jsonb, search = NULL
WHERE m.tenant_id = %(k1)s AND m.ns_path = %(k2)s AND m.key = %(k3)s AND m.value::text = %(old)s

-- name: rot_scratchpad_page
SELECT s.tenant_id, s.conversation_id, s.key, '', s.value::text
FROM {schema}.scratchpad s
WHERE (%(tenant)s::text IS NULL OR s.tenant_id = %(tenant)s)
  AND (s.tenant_id, s.conversation_id, s.key) > (%(k1)s, %(k2)s, %(k3)s)
ORDER BY s.tenant_id, s.conversation_id, s.key
LIMIT %(limit)s

-- name: rot_scratchpad_set
UPDATE {schema}.scratchpad s SET value = %(new)s::jsonb
WHERE s.tenant_id = %(k1)s AND s.conversation_id = %(k2)s AND s.key = %(k3)s AND s.value::text = %(old)s

-- name: rot_workflow_steps_page
SELECT s.tenant_id, s.conversation_id, s.workflow, s.step, s.result::text
FROM {schema}.workflow_steps s
WHERE (%(tenant)s::text IS NULL OR s.tenant_id = %(tenant)s) AND s.result IS NOT NULL
  AND (s.tenant_id, s.conversation_id, s.workflow, s.step) > (%(k1)s, %(k2)s, %(k3)s, %(k4)s)
ORDER BY s.tenant_id, s.conversation_id, s.workflow, s.step
LIMIT %(limit)s

-- name: rot_workflow_steps_set
UPDATE {schema}.workflow_steps s SET result = %(new)s::jsonb
WHERE s.tenant_id = %(k1)s AND s.conversation_id = %(k2)s AND s.workflow = %(k3)s AND s.step = %(k4)s
  AND s.result::text = %(old)s

-- name: rot_ledger_result_page
SELECT k.tenant_id, k.key, '', '', k.result::text
FROM {schema}.idempotency_keys k
WHERE (%(tenant)s::text IS NULL OR k.tenant_id = %(tenant)s) AND k.result IS NOT NULL
  AND (k.tenant_id, k.key) > (%(k1)s, %(k2)s)
ORDER BY k.tenant_id, k.key
LIMIT %(limit)s

-- name: rot_ledger_result_set
UPDATE {schema}.idempotency_keys k SET result = %(new)s::jsonb
WHERE k.tenant_id = %(k1)s AND k.key = %(k2)s AND k.result::text = %(old)s

-- name: rot_ledger_request_page
SELECT k.tenant_id, k.key, '', '', k.request::text
FROM {schema}.idempotency_keys k
WHERE (%(tenant)s::text IS NULL OR k.tenant_id = %(tenant)s) AND k.request IS NOT NULL
  AND (k.tenant_id, k.key) > (%(k1)s, %(k2)s)
ORDER BY k.tenant_id, k.key
LIMIT %(limit)s

-- name: rot_ledger_request_set
UPDATE {schema}.idempotency_keys k SET request = %(new)s::jsonb
WHERE k.tenant_id = %(k1)s AND k.key = %(k2)s AND k.request::text = %(old)s
