-- The event log. Columns returned: conversation_id, seq, event_id, kind, author, payload, created_at

-- name: events_append
-- Allocates contiguous seq numbers from conversations.last_seq under the conversation's row lock, skips
-- event ids already stored (idempotent re-append) and, with %(expected_seq)s, appends only if the log is
-- still at that position. Returns no row when nothing was appended; the caller then finds out why.
WITH input AS (
    SELECT t.event_id, t.kind, t.author, t.payload, t.created_at, t.ord
    FROM unnest(%(event_ids)s::text[], %(kinds)s::text[], %(authors)s::text[], %(payloads)s::jsonb[],
                %(created)s::timestamptz[])
         WITH ORDINALITY AS t(event_id, kind, author, payload, created_at, ord)
), fresh AS (
    SELECT i.*, row_number() OVER (ORDER BY i.ord) AS n
    FROM input i
    WHERE NOT EXISTS (
        SELECT 1 FROM {schema}.events e
        WHERE e.tenant_id = %(tenant)s AND e.conversation_id = %(conversation_id)s AND e.event_id = i.event_id)
), head AS (
    UPDATE {schema}.conversations c
    SET last_seq = c.last_seq + (SELECT count(*) FROM fresh), version = c.version + 1, updated_at = now()
    WHERE c.tenant_id = %(tenant)s AND c.id = %(conversation_id)s
      AND (%(expected_seq)s::bigint IS NULL OR c.last_seq = %(expected_seq)s)
      AND EXISTS (SELECT 1 FROM fresh)
    RETURNING c.last_seq - (SELECT count(*) FROM fresh) AS base
)
INSERT INTO {schema}.events AS e (tenant_id, conversation_id, seq, event_id, kind, author, payload, created_at)
SELECT %(tenant)s, %(conversation_id)s, head.base + f.n, f.event_id, f.kind, f.author, f.payload,
       coalesce(f.created_at, now())
FROM fresh f CROSS JOIN head
RETURNING e.conversation_id, e.seq, e.event_id, e.kind, e.author, e.payload::text, e.created_at

-- name: events_by_id
SELECT e.conversation_id, e.seq, e.event_id, e.kind, e.author, e.payload::text, e.created_at
FROM {schema}.events e
WHERE e.tenant_id = %(tenant)s AND e.conversation_id = %(conversation_id)s AND e.event_id = ANY(%(event_ids)s::text[])
ORDER BY e.seq

-- name: events_list
-- The newest %(limit)s events (all when NULL), returned oldest first. The primary key serves the
-- descending scan, so the cost does not depend on how long the history is.
SELECT * FROM (
    SELECT e.conversation_id, e.seq, e.event_id, e.kind, e.author, e.payload::text, e.created_at
    FROM {schema}.events e
    WHERE e.tenant_id = %(tenant)s AND e.conversation_id = %(conversation_id)s
      AND e.seq > coalesce(%(after_seq)s::bigint, 0)
      AND (%(since)s::timestamptz IS NULL OR e.created_at >= %(since)s)
      AND (%(kinds)s::text[] IS NULL OR e.kind = ANY(%(kinds)s::text[]))
    ORDER BY e.seq DESC
    LIMIT %(limit)s
) newest
ORDER BY seq

-- name: events_pop
-- Removes the last event; rewinding last_seq keeps the log contiguous for the next append.
WITH head AS (
    UPDATE {schema}.conversations c
    SET last_seq = c.last_seq - 1, version = c.version + 1, updated_at = now()
    WHERE c.tenant_id = %(tenant)s AND c.id = %(conversation_id)s
      AND EXISTS (SELECT 1 FROM {schema}.events e
                  WHERE e.tenant_id = c.tenant_id AND e.conversation_id = c.id AND e.seq = c.last_seq)
    RETURNING c.last_seq + 1 AS popped
)
DELETE FROM {schema}.events e
USING head
WHERE e.tenant_id = %(tenant)s AND e.conversation_id = %(conversation_id)s AND e.seq = head.popped
RETURNING e.conversation_id, e.seq, e.event_id, e.kind, e.author, e.payload::text, e.created_at

-- name: events_clear
WITH head AS (
    UPDATE {schema}.conversations c SET version = c.version + 1, updated_at = now()
    WHERE c.tenant_id = %(tenant)s AND c.id = %(conversation_id)s
    RETURNING c.id
), gone AS (
    DELETE FROM {schema}.events e USING head
    WHERE e.tenant_id = %(tenant)s AND e.conversation_id = head.id
    RETURNING 1
)
SELECT count(*) FROM gone
