-- A turn's commit ("save state" of the brief's load -> process -> save) as ONE statement: one round trip,
-- its commit included, where a pipelined BEGIN / version check / append / state compare-and-swap / status
-- update / COMMIT cost psycopg four round trips and the server five statements.

-- name: turn_save
-- The conversations UPDATE is the version check, the seq allocation (as in events_append_plain), the
-- status change and the version bump (one per turn) at once. It takes the conversation's row lock; if
-- another writer committed since this statement's snapshot, Postgres re-evaluates the WHERE on the newest
-- row version, so check_version sees the version that is really there and raises PAS01
-- (VersionConflict) with it. Events, the state document and its history row are written only through
-- head. A re-delivered event id fails on events_event_id_key (nothing is written); the caller drops the
-- stored ids and runs the statement again. The last two SELECTs return no row, or raise PAS02 when the
-- conversation is gone, or PAS01 when the state document is not at %(state_version)s (a document write
-- bumps the conversation's version, so the check on head covers it already: this is the belt to those
-- braces). Any raise rolls the whole statement back. check_version (plpgsql, ~5 us a call) runs only
-- when a check fails.
WITH head AS (
    UPDATE {schema}.conversations c
    SET last_seq = c.last_seq + %(n)s, version = c.version + 1, updated_at = now(),
        status = coalesce(%(status)s, c.status)
    WHERE c.tenant_id = %(tenant)s AND c.id = %(id)s
      AND (c.version = %(expected_version)s
           OR {schema}.check_version(%(expected_version)s, c.version, 'conversation ' || c.id) IS NULL)
    RETURNING c.last_seq - %(n)s AS base
), saved AS (
    INSERT INTO {schema}.state_documents AS d (tenant_id, scope, app, subject, name, version, data, updated_at)
    SELECT %(tenant)s, 'conversation', '', %(id)s, %(state_name)s, 1, %(state)s::jsonb, now()
    FROM head
    WHERE %(state)s::jsonb IS NOT NULL
    ON CONFLICT (tenant_id, scope, app, subject, name) DO UPDATE
    SET version = d.version + 1, data = EXCLUDED.data, updated_at = now()
    WHERE d.version = %(state_version)s
    RETURNING d.version, d.data, d.updated_at
), logged AS (
    INSERT INTO {schema}.state_changes (tenant_id, scope, app, subject, name, version, data, changed_at)
    SELECT %(tenant)s, 'conversation', '', %(id)s, %(state_name)s, s.version, s.data, s.updated_at FROM saved s
), appended AS (
    INSERT INTO {schema}.events AS e (tenant_id, conversation_id, seq, event_id, kind, author, payload, created_at)
    SELECT %(tenant)s, %(id)s, head.base + t.ord, t.r->>0, t.r->>1, t.r->>2, (t.r->3)::json,
           coalesce((t.r->>4)::timestamptz, now())
    FROM jsonb_array_elements(%(events)s::jsonb) WITH ORDINALITY AS t(r, ord)
    CROSS JOIN head
    RETURNING e.seq, e.event_id, e.created_at
)
-- The first row (seq NULL) is the commit's now(): the new updated_at of the conversation and of the
-- document, which the Redis tier's entry is rewritten with (no read after the commit).
SELECT NULL::bigint, NULL::text, now() FROM head
UNION ALL
SELECT a.seq, a.event_id, a.created_at FROM appended a
UNION ALL
SELECT NULL, NULL, NULL
WHERE NOT EXISTS (SELECT 1 FROM head)
  AND {schema}.check_version(%(expected_version)s, NULL, 'conversation ' || %(id)s) IS NULL
UNION ALL
SELECT NULL, NULL, NULL
-- saved: the version it replaced (0 when it was created); not saved: the one in the way
FROM (SELECT coalesce((SELECT s.version - 1 FROM saved s),
                      nullif((SELECT d.version FROM {schema}.state_documents d
                              WHERE d.tenant_id = %(tenant)s AND d.scope = 'conversation' AND d.app = ''
                                AND d.subject = %(id)s AND d.name = %(state_name)s), %(state_version)s),
                      -1) AS actual) v
WHERE %(state)s::jsonb IS NOT NULL AND v.actual <> %(state_version)s
  AND {schema}.check_version(%(state_version)s, v.actual, 'state ' || quote_literal(%(state_name)s) || ' version')
      IS NULL

-- name: turn_load
-- What a turn starts from, in ONE row and one snapshot: the conversation, its state document and its
-- newest %(limit)s events (all when NULL) as one JSON array of [seq, event_id, kind, author, payload,
-- created_at], oldest first. One array parses in one call on the client, where 20 rows of payloads took
-- 20 (measured: ~130 us of Python for a 20-event load, the largest share of a turn's client CPU). No row
-- when the conversation does not exist. The primary key serves the newest-first scan, so the cost does
-- not depend on how long the history is.
SELECT c.tenant_id, c.id, c.app, c.framework, c.user_id, c.channel, c.status, c.metadata::text,
       c.version, c.last_seq, c.created_at, c.updated_at,
       d.version, d.data::text, d.updated_at,
       (SELECT json_agg(json_build_array(e.seq, e.event_id, e.kind, e.author, e.payload, e.created_at)
                        ORDER BY e.seq)::text
        FROM (SELECT e.seq, e.event_id, e.kind, e.author, e.payload, e.created_at
              FROM {schema}.events e
              WHERE e.tenant_id = %(tenant)s AND e.conversation_id = %(id)s
              ORDER BY e.seq DESC
              LIMIT %(limit)s) e)
FROM {schema}.conversations c
LEFT JOIN {schema}.state_documents d
  ON d.tenant_id = %(tenant)s AND d.scope = 'conversation' AND d.app = '' AND d.subject = %(id)s
 AND d.name = %(state_name)s
WHERE c.tenant_id = %(tenant)s AND c.id = %(id)s
