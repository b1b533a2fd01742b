-- Versioned state documents. A document is addressed by (scope, app, subject, name). Columns returned:
-- scope, app, subject, name, version, data, updated_at.
-- Writes to a conversation-scoped document lock the conversation row first (the same order as appends,
-- so the two never deadlock) and bump its version, so a turn sees any change to its conversation.

-- name: state_get_many
SELECT r.ord, d.scope, d.app, d.subject, d.name, d.version, d.data::text, d.updated_at
FROM unnest(%(scopes)s::text[], %(apps)s::text[], %(subjects)s::text[], %(names)s::text[])
     WITH ORDINALITY AS r(scope, app, subject, name, ord)
JOIN {schema}.state_documents d
  ON d.tenant_id = %(tenant)s AND d.scope = r.scope AND d.app = r.app AND d.subject = r.subject AND d.name = r.name
 -- all documents of one subject (the usual case): the subject as a constant too, so that a table partitioned
 -- or distributed by subject is pruned at plan time (tests/core/test_partitioning.py)
 AND (%(subject)s::text IS NULL OR d.subject = %(subject)s)

-- name: state_upsert
-- Create, or (when %(expected_version)s is NULL) update unconditionally. %(replace)s: whole document;
-- otherwise top-level keys are merged server-side, so concurrent patches never lose each other. A merge
-- whose result would print longer than %(max_bytes)s is not applied (nothing returned).
WITH conv AS (
    SELECT 1 FROM {schema}.conversations c
    WHERE %(scope)s = 'conversation' AND c.tenant_id = %(tenant)s AND c.id = %(subject)s
    FOR UPDATE
), up AS (
    INSERT INTO {schema}.state_documents AS d (tenant_id, scope, app, subject, name, version, data, updated_at)
    SELECT %(tenant)s, %(scope)s, %(app)s, %(subject)s, %(name)s, 1, %(data)s::jsonb - %(delete)s::text[], now()
    WHERE %(scope)s <> 'conversation' OR EXISTS (SELECT 1 FROM conv)
    ON CONFLICT (tenant_id, scope, app, subject, name) DO UPDATE
    SET version = d.version + 1,
        data = CASE WHEN %(replace)s THEN EXCLUDED.data ELSE (d.data - %(delete)s::text[]) || EXCLUDED.data END,
        updated_at = now()
    WHERE %(expected_version)s::bigint IS NULL
      AND (%(replace)s OR octet_length(((d.data - %(delete)s::text[]) || EXCLUDED.data)::text) <= %(max_bytes)s)
    RETURNING d.scope, d.app, d.subject, d.name, d.version, d.data, d.updated_at
), log AS (
    INSERT INTO {schema}.state_changes (tenant_id, scope, app, subject, name, version, data, changed_at)
    SELECT %(tenant)s, up.scope, up.app, up.subject, up.name, up.version, up.data, up.updated_at FROM up
), bump AS (
    UPDATE {schema}.conversations c SET version = c.version + 1, updated_at = now()
    WHERE %(scope)s = 'conversation' AND c.tenant_id = %(tenant)s AND c.id = %(subject)s
      AND EXISTS (SELECT 1 FROM up)
)
SELECT up.scope, up.app, up.subject, up.name, up.version, up.data::text, up.updated_at FROM up

-- name: state_cas
-- Compare-and-swap: update only if the document is at %(expected_version)s.
WITH conv AS (
    SELECT 1 FROM {schema}.conversations c
    WHERE %(scope)s = 'conversation' AND c.tenant_id = %(tenant)s AND c.id = %(subject)s
    FOR UPDATE
), up AS (
    UPDATE {schema}.state_documents d
    SET version = d.version + 1,
        data = CASE WHEN %(replace)s THEN %(data)s::jsonb ELSE (d.data - %(delete)s::text[]) || %(data)s::jsonb END,
        updated_at = now()
    WHERE d.tenant_id = %(tenant)s AND d.scope = %(scope)s AND d.app = %(app)s AND d.subject = %(subject)s
      AND d.name = %(name)s AND d.version = %(expected_version)s
      AND (%(scope)s <> 'conversation' OR EXISTS (SELECT 1 FROM conv))
      AND (%(replace)s OR octet_length(((d.data - %(delete)s::text[]) || %(data)s::jsonb)::text) <= %(max_bytes)s)
    RETURNING d.scope, d.app, d.subject, d.name, d.version, d.data, d.updated_at
), log AS (
    INSERT INTO {schema}.state_changes (tenant_id, scope, app, subject, name, version, data, changed_at)
    SELECT %(tenant)s, up.scope, up.app, up.subject, up.name, up.version, up.data, up.updated_at FROM up
), bump AS (
    UPDATE {schema}.conversations c SET version = c.version + 1, updated_at = now()
    WHERE %(scope)s = 'conversation' AND c.tenant_id = %(tenant)s AND c.id = %(subject)s
      AND EXISTS (SELECT 1 FROM up)
)
SELECT up.scope, up.app, up.subject, up.name, up.version, up.data::text, up.updated_at FROM up

-- name: state_version
SELECT d.version FROM {schema}.state_documents d
WHERE d.tenant_id = %(tenant)s AND d.scope = %(scope)s AND d.app = %(app)s AND d.subject = %(subject)s
  AND d.name = %(name)s

-- name: state_history
SELECT h.scope, h.app, h.subject, h.name, h.version, h.data::text, h.changed_at
FROM {schema}.state_changes h
WHERE h.tenant_id = %(tenant)s AND h.scope = %(scope)s AND h.app = %(app)s AND h.subject = %(subject)s
  AND h.name = %(name)s
  AND (%(version)s::bigint IS NULL OR h.version <= %(version)s)
  AND (%(at)s::timestamptz IS NULL OR h.changed_at <= %(at)s)
ORDER BY h.version DESC
LIMIT %(limit)s
