-- The event log. Columns returned: conversation_id, seq, event_id, kind, author, payload, created_at

-- name: events_append
-- Allocates contiguous seq numbers from conversations.last_seq under the conversation's row lock, skips
-- event ids already stored (idempotent re-append) and, with %(expected_seq)s, appends only if the log is
-- still at that position. State patches (top-level keys merged into documents) apply in the same statement
-- and only when something was appended, so a re-delivered event never applies its state change twice.
-- Returns no row when nothing was appended; the caller then finds out why. Payloads are not echoed back.
-- Events travel as ONE jsonb array of [event_id, kind, author, payload, created_at] rows, and patches as
-- one of [scope, app, subject, name, data]: a single parameter parses faster on both ends than one array
-- parameter per column (measured: about 15% of an append's whole round trip).
WITH input AS (
    SELECT t.r->>0 AS event_id, t.r->>1 AS kind, t.r->>2 AS author, (t.r->3)::json AS payload,
           (t.r->>4)::timestamptz AS created_at, t.ord
    FROM jsonb_array_elements(%(events)s::jsonb) WITH ORDINALITY AS t(r, ord)
), fresh AS (
    -- One unique-index probe per input row, whatever the planner knows about the table: a scalar
    -- subquery is never flattened into a join, and an anti-join planned without statistics (fresh
    -- tables) reads the conversation's whole history.
    SELECT i.*, row_number() OVER (ORDER BY i.ord) AS n
    FROM input i
    WHERE (SELECT e.seq FROM {schema}.events e
           WHERE e.tenant_id = %(tenant)s AND e.conversation_id = %(conversation_id)s
             AND e.event_id = i.event_id) IS NULL
), total AS (
    SELECT count(*) AS n FROM fresh
), head AS (
    UPDATE {schema}.conversations c
    SET last_seq = c.last_seq + total.n, version = c.version + 1, updated_at = now()
    FROM total
    WHERE c.tenant_id = %(tenant)s AND c.id = %(conversation_id)s
      AND (%(expected_seq)s::bigint IS NULL OR c.last_seq = %(expected_seq)s)
      AND total.n > 0
    RETURNING c.last_seq - total.n AS base
), patched AS (
    INSERT INTO {schema}.state_documents AS d (tenant_id, scope, app, subject, name, version, data, updated_at)
    SELECT %(tenant)s, p.r->>0, p.r->>1, p.r->>2, p.r->>3, 1, p.r->4, now()
    FROM jsonb_array_elements(%(patches)s::jsonb) AS p(r)
    WHERE EXISTS (SELECT 1 FROM head)
    ON CONFLICT (tenant_id, scope, app, subject, name) DO UPDATE
    SET version = d.version + 1, data = d.data || EXCLUDED.data, updated_at = now()
    RETURNING d.scope, d.app, d.subject, d.name, d.version, d.data, d.updated_at
), logged AS (
    INSERT INTO {schema}.state_changes (tenant_id, scope, app, subject, name, version, data, changed_at)
    SELECT %(tenant)s, p.scope, p.app, p.subject, p.name, p.version, p.data, p.updated_at FROM patched p
)
INSERT INTO {schema}.events AS e (tenant_id, conversation_id, seq, event_id, kind, author, payload, created_at)
SELECT %(tenant)s, %(conversation_id)s, head.base + f.n, f.event_id, f.kind, f.author, f.payload,
       coalesce(f.created_at, now())
FROM fresh f CROSS JOIN head
RETURNING e.seq, e.event_id, e.created_at

-- name: events_append_fast
-- The common case, about half the server work of events_append: new event ids. A re-delivered id makes
-- the insert fail on events_event_id_key, which rolls the whole statement back (no seq is lost, no patch
-- applied), and the caller falls back to events_append, which skips stored ids.
WITH head AS (
    UPDATE {schema}.conversations c
    SET last_seq = c.last_seq + %(n)s, version = c.version + 1, updated_at = now()
    WHERE c.tenant_id = %(tenant)s AND c.id = %(conversation_id)s
      AND (%(expected_seq)s::bigint IS NULL OR c.last_seq = %(expected_seq)s)
    RETURNING c.last_seq - %(n)s AS base
), patched AS (
    INSERT INTO {schema}.state_documents AS d (tenant_id, scope, app, subject, name, version, data, updated_at)
    SELECT %(tenant)s, p.r->>0, p.r->>1, p.r->>2, p.r->>3, 1, p.r->4, now()
    FROM jsonb_array_elements(%(patches)s::jsonb) AS p(r)
    WHERE EXISTS (SELECT 1 FROM head)
    ON CONFLICT (tenant_id, scope, app, subject, name) DO UPDATE
    SET version = d.version + 1, data = d.data || EXCLUDED.data, updated_at = now()
    RETURNING d.scope, d.app, d.subject, d.name, d.version, d.data, d.updated_at
), logged AS (
    INSERT INTO {schema}.state_changes (tenant_id, scope, app, subject, name, version, data, changed_at)
    SELECT %(tenant)s, p.scope, p.app, p.subject, p.name, p.version, p.data, p.updated_at FROM patched p
)
INSERT INTO {schema}.events AS e (tenant_id, conversation_id, seq, event_id, kind, author, payload, created_at)
SELECT %(tenant)s, %(conversation_id)s, head.base + t.ord, t.r->>0, t.r->>1, t.r->>2, (t.r->3)::json,
       coalesce((t.r->>4)::timestamptz, now())
FROM jsonb_array_elements(%(events)s::jsonb) WITH ORDINALITY AS t(r, ord)
CROSS JOIN head
RETURNING e.seq, e.event_id, e.created_at

-- name: events_append_plain
-- events_append_fast for an append without state patches (the usual one): the two patch CTEs, even when
-- empty, open state_documents, state_changes and their indexes, ~10% of this statement's server time.
WITH head AS (
    UPDATE {schema}.conversations c
    SET last_seq = c.last_seq + %(n)s, version = c.version + 1, updated_at = now()
    WHERE c.tenant_id = %(tenant)s AND c.id = %(conversation_id)s
      AND (%(expected_seq)s::bigint IS NULL OR c.last_seq = %(expected_seq)s)
    RETURNING c.last_seq - %(n)s AS base
)
INSERT INTO {schema}.events AS e (tenant_id, conversation_id, seq, event_id, kind, author, payload, created_at)
SELECT %(tenant)s, %(conversation_id)s, head.base + t.ord, t.r->>0, t.r->>1, t.r->>2, (t.r->3)::json,
       coalesce((t.r->>4)::timestamptz, now())
FROM jsonb_array_elements(%(events)s::jsonb) WITH ORDINALITY AS t(r, ord)
CROSS JOIN head
RETURNING e.seq, e.event_id, e.created_at

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
-- Second statement of a pop, after conversation_lock_row in the same transaction: its snapshot is taken
-- after the lock was granted, so it sees every append and pop that committed before. last_seq is the log's
-- position, not a count: it moves FORWARD (by one) on a pop as on every change of the log, so a seq is never
-- handed out twice and an append with an expected_seq read before the pop fails (no ABA). The newest event
-- is the greatest seq (pops and replacements leave gaps), one backward step of the primary key.
WITH gone AS (
    DELETE FROM {schema}.events e
    WHERE e.tenant_id = %(tenant)s AND e.conversation_id = %(conversation_id)s
      AND e.seq = (SELECT max(n.seq) FROM {schema}.events n
                   WHERE n.tenant_id = %(tenant)s AND n.conversation_id = %(conversation_id)s)
    RETURNING e.conversation_id, e.seq, e.event_id, e.kind, e.author, e.payload, e.created_at
), head AS (
    UPDATE {schema}.conversations c
    SET last_seq = c.last_seq + 1, version = c.version + 1, updated_at = now()
    WHERE c.tenant_id = %(tenant)s AND c.id = %(conversation_id)s AND EXISTS (SELECT 1 FROM gone)
)
SELECT g.conversation_id, g.seq, g.event_id, g.kind, g.author, g.payload::text, g.created_at FROM gone g

-- name: conversation_lock_row
SELECT c.last_seq FROM {schema}.conversations c
WHERE c.tenant_id = %(tenant)s AND c.id = %(conversation_id)s
FOR UPDATE

-- name: event_payloads
-- Only the payloads of the newest %(limit)s events, oldest first (sessions that replay history).
SELECT event_id, payload, kind, author FROM (
    SELECT e.seq, e.event_id, e.payload::text AS payload, e.kind, e.author
    FROM {schema}.events e
    WHERE e.tenant_id = %(tenant)s AND e.conversation_id = %(conversation_id)s
    ORDER BY e.seq DESC
    LIMIT %(limit)s
) newest
ORDER BY seq

-- name: event_payloads_array
-- The same as event_payloads, for payloads that are not encrypted (they need no per-row associated data):
-- only their text, newest first; the caller joins them into ONE JSON array, parsed in one call instead of
-- one per event. 1,000 chat messages (147 KB) came 0.3-0.5 ms sooner as rows than aggregated on the server
-- into one text with string_agg (which sorted them again and built the text), and json_agg over jsonb
-- values took 5x the server time of string_agg.
SELECT e.payload::text
FROM {schema}.events e
WHERE e.tenant_id = %(tenant)s AND e.conversation_id = %(conversation_id)s
ORDER BY e.seq DESC
LIMIT %(limit)s

-- name: repeatable_read
SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY

-- name: events_clear
-- A clear that removed something moves the log's position forward (see events_pop).
WITH gone AS (
    DELETE FROM {schema}.events e
    WHERE e.tenant_id = %(tenant)s AND e.conversation_id = %(conversation_id)s
    RETURNING 1
), n AS (
    SELECT count(*) AS n FROM gone
), head AS (
    UPDATE {schema}.conversations c
    SET version = c.version + 1, updated_at = now(), last_seq = c.last_seq + least(n.n, 1)
    FROM n
    WHERE c.tenant_id = %(tenant)s AND c.id = %(conversation_id)s
)
SELECT n FROM n

-- name: events_tail_ids
-- The newest %(n)s events, oldest first, as (seq, event_id): what a replacement of the tail checks against.
SELECT seq, event_id FROM (
    SELECT e.seq, e.event_id
    FROM {schema}.events e
    WHERE e.tenant_id = %(tenant)s AND e.conversation_id = %(conversation_id)s
    ORDER BY e.seq DESC
    LIMIT %(n)s
) tail
ORDER BY seq

-- name: events_oldest
-- The oldest %(limit)s events after seq %(after_seq)s and before %(before_seq)s, oldest first (a prefix
-- to prune, read in batches).
SELECT e.conversation_id, e.seq, e.event_id, e.kind, e.author, e.payload::text, e.created_at
FROM {schema}.events e
WHERE e.tenant_id = %(tenant)s AND e.conversation_id = %(conversation_id)s
  AND e.seq > %(after_seq)s AND e.seq < %(before_seq)s
ORDER BY e.seq
LIMIT %(limit)s

-- name: events_cut
-- Under the conversation row lock (conversation_lock_row): deletes the events up to %(upto)s (a pruned
-- prefix; 0 for none) and from %(from_seq)s on (a replaced tail). The events appended next in the same
-- transaction take new seqs after last_seq, so a replacement is never confused with what it replaced; with
-- nothing to append (%(bump)s = 1) the position moves forward by one, as a pop's does.
WITH gone AS (
    DELETE FROM {schema}.events e
    WHERE e.tenant_id = %(tenant)s AND e.conversation_id = %(conversation_id)s
      AND (e.seq <= %(upto)s OR e.seq >= %(from_seq)s)
    RETURNING 1
), n AS (
    SELECT count(*) AS n FROM gone
), head AS (
    UPDATE {schema}.conversations c
    SET last_seq = c.last_seq + least(n.n, %(bump)s), version = c.version + 1, updated_at = now()
    FROM n
    WHERE c.tenant_id = %(tenant)s AND c.id = %(conversation_id)s
)
SELECT n FROM n
