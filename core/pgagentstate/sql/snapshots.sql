-- Snapshots: chains of opaque checkpoints (LangGraph's) per (conversation, namespace), channel values as
-- ordered lists of content-addressed chunks, and pending writes. Every statement is scoped by %(tenant)s.
--
-- Reads return one row shape for every kind of record, so that a snapshot, the blobs it references, the
-- chunks of those blobs (each distinct chunk once) and its pending writes arrive in one statement:
--   kind  conversation_id namespace snapshot_id parent_id key     type data  text1     text2            chunks  idx   flag
--   's'   conv            ns        id          parent    -       type data  metadata  channel_versions -       -     is_head
--   'b'   conv            ns        -           hashes    channel type -     version   base             -       -     -
--   'c'   conv            -         -           -         hash    -    data  -         -                -       -     -
--   'C'   conv            -         -           -         -       -    data  hashes    -                -       -     -
--         (every chunk of the conversation the other rows need, at once: ``data`` holds each chunk as a
--          4-byte big-endian length and its bytes, in the order of ``hashes``)
-- Ids are text here (id_text of the stored bytes), and a list of chunk hashes ("hashes") is one string
-- of 16-character hashes (hash_text of the stored 12-byte hashes), without separators.
--   'w'   conv            ns        id          task_path channel type data  task_id   -                -       idx   -
--   'a'   conv            ns        id          -         -       -    -     -         -                seeded  depth -
--
-- The two long reads are documented here rather than in their text, which is sent with every execution
-- (and psycopg caches the parsing of statements up to 4 KiB only):
--
-- snapshot_read: newest first. NULL parameters do not filter; snapshot_id NULL with limit 1 is "the
-- latest". Each blob and each chunk is sent once, however many of the selected snapshots share it; blobs
-- that extend a base come with their bases (stored whole: one level). Blob lookups go through LATERAL ...
-- LIMIT 1 subqueries so that each one is an index probe whatever the statistics say: a join would be
-- free to scan every blob of the thread (or of the tenant). The chunks of a conversation come in one 'C'
-- row, read with one index range scan of the conversation's chunks, its rows kept by a hash lookup in the
-- hashes needed (an uncorrelated IN, hashed once): cheaper than an index probe per chunk. The IN is
-- wrapped in IS TRUE so that it stays a hashed subplan: a bare IN is turned into a semi-join, and on
-- estimates of a few rows (fresh statistics, or a plan cached while the tables were small) Postgres
-- joined it as a nested loop comparing every chunk with every hash (1.4 of 1.8 ms for 100 messages,
-- growing with their square). Both aggregates of that row see the rows in the same order, so no sort
-- is needed to pair chunks and hashes. {snapshot_keys}: the keys the call gives (thread, namespace,
-- snapshot) as plain equalities, chosen by the core: the "NULL does not filter" conditions cannot be
-- index conditions of a generic plan, which then read every snapshot of the tenant (1,650 rows of a
-- 0.73 ms read at 9 threads); each combination is a statement of its own, with a plan of its own.
--
-- snapshot_chain: walks the parents of snapshot_id (not the snapshot itself), nearest first, until every
-- channel in channels has a stored value (a blob at the version the ancestor references): its "seed".
-- Returns the ancestors walked ('a', with the channels seeded there), and unless payload is false the
-- writes those ancestors hold for channels not yet seeded above them, plus the seed blobs (with the
-- bases they extend) and their chunks.

-- name: snapshot_put
-- The chunks, the blobs and the snapshot in one statement: one round trip, atomic without BEGIN/COMMIT.
-- A second child of the same parent that is not a fork fails on snapshots_linear_child_idx. %(forked)s NULL
-- (parentless snapshots): a fork unless the namespace is empty, so that of two first snapshots racing for
-- an empty thread one fails on that index too. %(blobs)s is one jsonb array of [channel, version, type,
-- space-separated chunk ids, base] rows, %(chunks)s one of [id, base64 data].
-- Two checks, each one primary-key probe per item, so that neither grows with the thread: the %(known)s
-- chunks ([id] rows), which the caller did not send because it saw them stored, must all still exist; the
-- bases of the %(n_bases)s blobs that extend another version of their channel must be stored whole (no
-- base of their own), so that a read follows at most one base. If not, nothing is written (0 rows) and
-- the caller sends them again. (As scans, they read every chunk, or every blob, of the thread: a replayed
-- put on a thread of 1,090 chunks took 0.95-1.18 ms against 0.65-0.68. They are counted over
-- jsonb_array_elements and not short-circuited on empty inputs: the estimates then do not depend on the
-- values, the prepared statement runs its generic plan, and Postgres does not plan each call anew -- which
-- it did, 0 generic plans in 60 puts, when calls without a base planned that check away.)
WITH ok AS (
    SELECT (SELECT count(*) FROM jsonb_array_elements(%(known)s::jsonb) AS x(r)
            WHERE (SELECT true FROM {schema}.snapshot_chunks k
                   WHERE k.tenant_id = %(tenant)s AND k.conversation_id = %(conversation_id)s
                     AND k.hash = {schema}.hash_bytes(x.r->>0))) = %(n_known)s
       AND (SELECT count(*) FROM jsonb_array_elements(%(blobs)s::jsonb) AS x(r)
            WHERE x.r->>4 IS NOT NULL
              AND (SELECT b.base IS NULL FROM {schema}.snapshot_blobs b
                   WHERE b.tenant_id = %(tenant)s AND b.conversation_id = %(conversation_id)s
                     AND b.namespace = %(namespace)s AND b.channel = x.r->>0 AND b.version = x.r->>4))
           = %(n_bases)s AS ok
), chunks AS (
    INSERT INTO {schema}.snapshot_chunks (tenant_id, conversation_id, hash, data)
    SELECT %(tenant)s, %(conversation_id)s, {schema}.hash_bytes(x.r->>0), decode(x.r->>1, 'base64')
    FROM jsonb_array_elements(%(chunks)s::jsonb) AS x(r)
    ON CONFLICT DO NOTHING
), blobs AS (
    INSERT INTO {schema}.snapshot_blobs (tenant_id, conversation_id, namespace, channel, version, type, chunks, base)
    SELECT %(tenant)s, %(conversation_id)s, %(namespace)s, x.r->>0, x.r->>1, x.r->>2,
           {schema}.hash_bytes(replace(x.r->>3, ' ', '')), x.r->>4
    FROM jsonb_array_elements(%(blobs)s::jsonb) AS x(r)
    WHERE (SELECT ok FROM ok)
    ON CONFLICT DO NOTHING
), {_snapshot_touch}
{_snapshot_insert}

-- name: snapshot_put_lean
-- snapshot_put for a snapshot that sends no chunk and no blob and names no stored chunk (a step that
-- changed only values kept in the body: 2 of the 5 puts of a 3-node graph's invoke). The same row written
-- the same way without the chunk, blob and check CTEs: their executor setup alone took ~65 us of the
-- statement's ~450 (a replay of captured puts on a bare connection, 2026-12-06).
WITH ok AS (SELECT true AS ok), {_snapshot_touch}
{_snapshot_insert}

-- name: _snapshot_touch
-- Retention looks at updated_at; refreshing it at most every 30 s keeps this a no-op on hot threads.
touched AS (
    UPDATE {schema}.conversations c SET updated_at = now()
    WHERE c.tenant_id = %(tenant)s AND c.id = %(conversation_id)s AND c.updated_at < now() - interval '30 seconds'
)

-- name: _snapshot_insert
-- The snapshot row of the snapshot_put statements, written only when their ok CTE says so.
INSERT INTO {schema}.snapshots AS s
    (tenant_id, conversation_id, namespace, snapshot_id, parent_id, run_id, type, data, metadata,
     channel_versions, forked)
SELECT %(tenant)s, %(conversation_id)s, %(namespace)s, {schema}.id_bytes(%(snapshot_id)s),
       {schema}.id_bytes(%(parent_id)s), %(run_id)s, %(type)s,
       %(data)s, %(metadata)s::jsonb, %(channel_versions)s::jsonb,
       coalesce(%(forked)s::boolean, EXISTS (
           SELECT 1 FROM {schema}.snapshots x
           WHERE x.tenant_id = %(tenant)s AND x.conversation_id = %(conversation_id)s
             AND x.namespace = %(namespace)s))
WHERE (SELECT ok FROM ok)
ON CONFLICT (tenant_id, conversation_id, namespace, snapshot_id) DO UPDATE
SET type = EXCLUDED.type, data = EXCLUDED.data, metadata = EXCLUDED.metadata,
    channel_versions = EXCLUDED.channel_versions, run_id = EXCLUDED.run_id
RETURNING {_snapshot_stamp}

-- name: snapshot_conversation_ensure
-- Creates the conversation a chain starts in. Unless %(revive)s, a conversation deleted through
-- snapshot_conversation_delete stays deleted (late writes of a run that was still in flight).
-- A conversation that pending writes created before the first snapshot (they may arrive first) has no user
-- yet: the snapshot that names one gives it.
INSERT INTO {schema}.conversations (tenant_id, id, framework, user_id)
SELECT %(tenant)s, %(conversation_id)s, %(framework)s, %(user_id)s
WHERE %(revive)s OR NOT EXISTS (
    SELECT 1 FROM {schema}.snapshot_tombstones t
    WHERE t.tenant_id = %(tenant)s AND t.conversation_id = %(conversation_id)s)
ON CONFLICT (tenant_id, id) DO UPDATE SET user_id = EXCLUDED.user_id
    WHERE {schema}.conversations.user_id = '' AND EXCLUDED.user_id <> ''

-- name: snapshot_conversation_exists
SELECT EXISTS (SELECT 1 FROM {schema}.conversations c WHERE c.tenant_id = %(tenant)s AND c.id = %(conversation_id)s)

-- name: snapshot_tombstone_clear
DELETE FROM {schema}.snapshot_tombstones t WHERE t.tenant_id = %(tenant)s AND t.conversation_id = %(conversation_id)s

-- name: snapshot_tombstone_put
INSERT INTO {schema}.snapshot_tombstones (tenant_id, conversation_id) VALUES (%(tenant)s, %(conversation_id)s)
ON CONFLICT (tenant_id, conversation_id) DO UPDATE SET deleted_at = now()

-- name: snapshot_head
SELECT {schema}.id_text(s.snapshot_id) FROM {schema}.snapshots s
WHERE s.tenant_id = %(tenant)s AND s.conversation_id = %(conversation_id)s AND s.namespace = %(namespace)s
ORDER BY s.snapshot_id DESC
LIMIT 1

-- name: snapshot_head_writes
-- The newest snapshot of a namespace ('h': its id and stamp) and its pending writes ('w', as
-- snapshot_read returns them). What a caller that knows a snapshot's contents needs to tell whether it is
-- still the head. The writes are one probe of the primary key (a subquery kept apart by OFFSET 0): as a
-- join on h's columns, the generic plan a connection made while the table was small scanned every write
-- of the tenant once it had grown (tests/core/test_snapshot_read_plan.py).
WITH h AS MATERIALIZED (
    SELECT s.snapshot_id, {_snapshot_stamp} AS stamp
    FROM {schema}.snapshots s
    WHERE s.tenant_id = %(tenant)s AND s.conversation_id = %(conversation_id)s AND s.namespace = %(namespace)s
    ORDER BY s.snapshot_id DESC
    LIMIT 1
)
SELECT 'h'::text, %(conversation_id)s::text, %(namespace)s::text, {schema}.id_text(h.snapshot_id), NULL::text,
       NULL::text, NULL::text, NULL::bytea, h.stamp, NULL::text, NULL::text[], NULL::int, NULL::boolean
FROM h
UNION ALL
SELECT 'w', %(conversation_id)s, %(namespace)s, {schema}.id_text(h.snapshot_id), w.task_path, w.channel, w.type,
       w.data, {schema}.id_text(w.task_id), NULL, NULL, w.idx, NULL
FROM h
CROSS JOIN LATERAL (
    SELECT w.task_path, w.channel, w.type, w.data, w.task_id, w.idx FROM {schema}.snapshot_writes w
    WHERE w.tenant_id = %(tenant)s AND w.conversation_id = %(conversation_id)s AND w.namespace = %(namespace)s
      AND w.snapshot_id = h.snapshot_id
    OFFSET 0) AS w

-- name: _snapshot_stamp
-- What snapshot_put returns and snapshot_head_writes reads: a hash of what a read of the snapshot row
-- returns (parent, type, body, metadata, blob versions; blobs are immutable per version), so that a
-- caller holding what it stored can tell it is still what is stored. Not xmin/ctid: a partitioned table
-- cannot return system columns from INSERT ... ON CONFLICT.
md5(coalesce(s.parent_id, ''::bytea) || s.data || convert_to(s.type || s.metadata::text || s.channel_versions::text, 'UTF8'))

-- name: snapshot_writes_put
-- Regular writes (idx >= 0): the first writer wins. Special channels (negative idx: error, interrupt,
-- resume, scheduled) are overwritten. Nothing is written for a conversation that does not exist.
-- %(writes)s: one jsonb array of [task_id, idx, channel, type, base64 data, task_path] rows (one parameter
-- is cheaper to send and to parse than six arrays, bytea[] as hex text in particular).
INSERT INTO {schema}.snapshot_writes AS w
    (tenant_id, conversation_id, namespace, snapshot_id, task_id, idx, channel, type, data, task_path)
SELECT %(tenant)s, %(conversation_id)s, %(namespace)s, {schema}.id_bytes(%(snapshot_id)s), {schema}.id_bytes(x.r->>0),
       (x.r->>1)::int, x.r->>2, x.r->>3,
       decode(x.r->>4, 'base64'), x.r->>5
FROM jsonb_array_elements(%(writes)s::jsonb) AS x(r)
WHERE EXISTS (SELECT 1 FROM {schema}.conversations c WHERE c.tenant_id = %(tenant)s AND c.id = %(conversation_id)s)
ON CONFLICT (tenant_id, conversation_id, namespace, snapshot_id, task_id, idx) DO UPDATE
SET channel = EXCLUDED.channel, type = EXCLUDED.type, data = EXCLUDED.data, task_path = EXCLUDED.task_path
WHERE EXCLUDED.idx < 0

-- name: snapshot_read
WITH sel AS MATERIALIZED (
    SELECT s.conversation_id, s.namespace, s.snapshot_id, s.parent_id, s.type, s.data, s.metadata,
           s.channel_versions
    FROM {schema}.snapshots s
    WHERE s.tenant_id = %(tenant)s {snapshot_keys}
      AND (%(conversation_id)s::text IS NULL OR s.conversation_id = %(conversation_id)s)
      AND (%(namespace)s::text IS NULL OR s.namespace = %(namespace)s)
      AND (%(snapshot_id)s::text IS NULL OR s.snapshot_id = {schema}.id_bytes(%(snapshot_id)s))
      AND (%(snapshot_ids)s::text[] IS NULL
           OR s.snapshot_id = ANY(ARRAY(SELECT {schema}.id_bytes(i) FROM unnest(%(snapshot_ids)s::text[]) AS i)))
      AND (%(before)s::text IS NULL OR s.snapshot_id < {schema}.id_bytes(%(before)s))
      AND (%(filter)s::jsonb IS NULL OR s.metadata @> %(filter)s::jsonb)
    ORDER BY s.snapshot_id DESC
    LIMIT %(limit)s
), direct AS MATERIALIZED (
    SELECT b.conversation_id, b.namespace, b.channel, b.version, b.type, b.chunks, b.base
    FROM (SELECT DISTINCT sel.conversation_id, sel.namespace, v.channel, v.version
          FROM sel CROSS JOIN LATERAL jsonb_each_text(sel.channel_versions) AS v(channel, version)) AS k
    CROSS JOIN LATERAL (
        SELECT b.* FROM {schema}.snapshot_blobs b
        WHERE b.tenant_id = %(tenant)s AND b.conversation_id = k.conversation_id AND b.namespace = k.namespace
          AND (%(conversation_id)s::text IS NULL OR b.conversation_id = %(conversation_id)s)
          AND b.channel = k.channel AND b.version = k.version
        LIMIT 1) AS b
), refs AS MATERIALIZED (
    SELECT * FROM direct
  UNION
    SELECT b.conversation_id, b.namespace, b.channel, b.version, b.type, b.chunks, b.base
    FROM (SELECT DISTINCT d.conversation_id, d.namespace, d.channel, d.base FROM direct d
          WHERE d.base IS NOT NULL) AS r
    CROSS JOIN LATERAL (
        SELECT b.* FROM {schema}.snapshot_blobs b
        WHERE b.tenant_id = %(tenant)s AND b.conversation_id = r.conversation_id AND b.namespace = r.namespace
          AND (%(conversation_id)s::text IS NULL OR b.conversation_id = %(conversation_id)s)
          AND b.channel = r.channel AND b.version = r.base
        LIMIT 1) AS b
)
SELECT 's'::text, sel.conversation_id, sel.namespace, {schema}.id_text(sel.snapshot_id),
       {schema}.id_text(sel.parent_id), NULL::text, sel.type,
       sel.data, sel.metadata::text, sel.channel_versions::text, NULL::text[], NULL::int,
       NOT EXISTS (SELECT 1 FROM {schema}.snapshots n
                   WHERE n.tenant_id = %(tenant)s AND n.conversation_id = sel.conversation_id
                     AND (%(conversation_id)s::text IS NULL OR n.conversation_id = %(conversation_id)s)
                     AND n.namespace = sel.namespace AND n.snapshot_id > sel.snapshot_id)
FROM sel
UNION ALL
SELECT 'b', r.conversation_id, r.namespace, NULL, {schema}.hash_text(r.chunks), r.channel, r.type, NULL, r.version,
       r.base, NULL, NULL, NULL
FROM refs r
UNION ALL
SELECT 'C', n.conversation_id, NULL, NULL, NULL, NULL, NULL, c.data, c.hashes, NULL, NULL, NULL, NULL
FROM (SELECT DISTINCT r.conversation_id FROM refs r) AS n
CROSS JOIN LATERAL (
    SELECT string_agg(int4send(octet_length(c.data)) || c.data, ''::bytea) AS data,
           {schema}.hash_text(string_agg(c.hash, ''::bytea)) AS hashes
    FROM {schema}.snapshot_chunks c
    WHERE c.tenant_id = %(tenant)s AND c.conversation_id = n.conversation_id
      AND (%(conversation_id)s::text IS NULL OR c.conversation_id = %(conversation_id)s)
      AND (c.hash IN (SELECT h FROM refs r CROSS JOIN LATERAL {schema}.hash_split(r.chunks) AS h)) IS TRUE) AS c
WHERE c.data IS NOT NULL
UNION ALL
SELECT 'w', w.conversation_id, w.namespace, {schema}.id_text(w.snapshot_id), w.task_path, w.channel, w.type, w.data,
       {schema}.id_text(w.task_id), NULL, NULL, w.idx, NULL
FROM sel
CROSS JOIN LATERAL (
    SELECT w.* FROM {schema}.snapshot_writes w
    WHERE w.tenant_id = %(tenant)s AND w.conversation_id = sel.conversation_id AND w.namespace = sel.namespace
      AND (%(conversation_id)s::text IS NULL OR w.conversation_id = %(conversation_id)s)
      AND w.snapshot_id = sel.snapshot_id
    OFFSET 0) AS w

-- name: snapshot_metadata_list
-- The metadata of the snapshots snapshot_read would select, newest first, for filtering where the
-- database cannot (encrypted metadata); the matches are then read by snapshot_read with their ids.
SELECT s.conversation_id, s.namespace, {schema}.id_text(s.snapshot_id), s.metadata::text
FROM {schema}.snapshots s
WHERE s.tenant_id = %(tenant)s
  AND (%(conversation_id)s::text IS NULL OR s.conversation_id = %(conversation_id)s)
  AND (%(namespace)s::text IS NULL OR s.namespace = %(namespace)s)
  AND (%(snapshot_id)s::text IS NULL OR s.snapshot_id = {schema}.id_bytes(%(snapshot_id)s))
  AND (%(before)s::text IS NULL OR s.snapshot_id < {schema}.id_bytes(%(before)s))
ORDER BY s.snapshot_id DESC

-- name: snapshot_chain
WITH RECURSIVE chain AS (
    SELECT p.snapshot_id, p.parent_id, p.channel_versions, 1 AS depth, x.remaining, x.seeded
    FROM {schema}.snapshots t
    JOIN {schema}.snapshots p
      ON p.tenant_id = %(tenant)s AND p.conversation_id = %(conversation_id)s AND p.namespace = %(namespace)s
     AND p.snapshot_id = t.parent_id
    CROSS JOIN LATERAL (
        SELECT coalesce(array_agg(ch.name) FILTER (WHERE b.channel IS NULL), '{}') AS remaining,
               coalesce(array_agg(ch.name) FILTER (WHERE b.channel IS NOT NULL), '{}') AS seeded
        FROM unnest(%(channels)s::text[]) AS ch(name)
        LEFT JOIN {schema}.snapshot_blobs b
          ON b.tenant_id = %(tenant)s AND b.conversation_id = %(conversation_id)s AND b.namespace = %(namespace)s
         AND b.channel = ch.name AND b.version = p.channel_versions ->> ch.name
    ) AS x
    WHERE t.tenant_id = %(tenant)s AND t.conversation_id = %(conversation_id)s AND t.namespace = %(namespace)s
      AND t.snapshot_id = {schema}.id_bytes(%(snapshot_id)s)
  UNION ALL
    SELECT p.snapshot_id, p.parent_id, p.channel_versions, c.depth + 1, x.remaining, x.seeded
    FROM chain c
    JOIN {schema}.snapshots p
      ON p.tenant_id = %(tenant)s AND p.conversation_id = %(conversation_id)s AND p.namespace = %(namespace)s
     AND p.snapshot_id = c.parent_id
    CROSS JOIN LATERAL (
        SELECT coalesce(array_agg(ch.name) FILTER (WHERE b.channel IS NULL), '{}') AS remaining,
               coalesce(array_agg(ch.name) FILTER (WHERE b.channel IS NOT NULL), '{}') AS seeded
        FROM unnest(c.remaining) AS ch(name)
        LEFT JOIN {schema}.snapshot_blobs b
          ON b.tenant_id = %(tenant)s AND b.conversation_id = %(conversation_id)s AND b.namespace = %(namespace)s
         AND b.channel = ch.name AND b.version = p.channel_versions ->> ch.name
    ) AS x
    WHERE cardinality(c.remaining) > 0
), chain_m AS MATERIALIZED (
    SELECT * FROM chain
), seed_blobs AS MATERIALIZED (
    SELECT b.channel, b.version, b.type, b.chunks, b.base, true AS seed
    FROM chain_m c
    CROSS JOIN LATERAL unnest(c.seeded) AS s(channel)
    JOIN {schema}.snapshot_blobs b
      ON b.tenant_id = %(tenant)s AND b.conversation_id = %(conversation_id)s AND b.namespace = %(namespace)s
     AND b.channel = s.channel AND b.version = c.channel_versions ->> s.channel
    WHERE %(payload)s
), seeds AS MATERIALIZED (
    SELECT * FROM seed_blobs
  UNION
    SELECT b.channel, b.version, b.type, b.chunks, b.base, false
    FROM seed_blobs s
    JOIN {schema}.snapshot_blobs b
      ON b.tenant_id = %(tenant)s AND b.conversation_id = %(conversation_id)s AND b.namespace = %(namespace)s
     AND b.channel = s.channel AND b.version = s.base
)
SELECT 'a'::text, %(conversation_id)s::text, %(namespace)s::text, {schema}.id_text(c.snapshot_id), NULL::text, NULL::text,
       NULL::text, NULL::bytea, NULL::text, NULL::text, c.seeded, c.depth, NULL::bool
FROM chain_m c
UNION ALL
SELECT 'b', %(conversation_id)s, %(namespace)s, NULL, {schema}.hash_text(s.chunks), s.channel, s.type, NULL, s.version,
       s.base, NULL, NULL, s.seed
FROM seeds s
UNION ALL
SELECT 'c', c.conversation_id, NULL, NULL, NULL, {schema}.hash_text(c.hash), NULL, c.data, NULL, NULL, NULL, NULL, NULL
FROM (SELECT DISTINCT x.hash FROM seeds s CROSS JOIN LATERAL {schema}.hash_split(s.chunks) AS x(hash)) AS h
JOIN {schema}.snapshot_chunks c
  ON c.tenant_id = %(tenant)s AND c.conversation_id = %(conversation_id)s AND c.hash = h.hash
UNION ALL
SELECT 'w', w.conversation_id, w.namespace, {schema}.id_text(w.snapshot_id), w.task_path, w.channel, w.type, w.data,
       {schema}.id_text(w.task_id), NULL, NULL, w.idx, NULL
FROM chain_m c
JOIN {schema}.snapshot_writes w
  ON w.tenant_id = %(tenant)s AND w.conversation_id = %(conversation_id)s AND w.namespace = %(namespace)s
 AND w.snapshot_id = c.snapshot_id AND w.channel = ANY(c.remaining || c.seeded)
WHERE %(payload)s

-- name: snapshot_delete_runs
WITH gone AS (
    DELETE FROM {schema}.snapshots s
    WHERE s.tenant_id = %(tenant)s AND s.run_id = ANY(%(run_ids)s::text[])
    RETURNING s.conversation_id, s.namespace, s.snapshot_id
), writes AS (
    DELETE FROM {schema}.snapshot_writes w
    USING gone
    WHERE w.tenant_id = %(tenant)s AND w.conversation_id = gone.conversation_id
      AND w.namespace = gone.namespace AND w.snapshot_id = gone.snapshot_id
)
SELECT DISTINCT gone.conversation_id FROM gone

-- name: snapshot_gc_hash_joins
-- Runs first in the transaction of snapshot_blobs_gc and snapshot_chunks_gc. Their NOT EXISTS is an
-- anti-join against what is still used; on estimates of a few rows (fresh statistics: every chunk list
-- is one hash_split call) Postgres made it a nested loop that scans every used row again for each row
-- looked at: 180,000 comparisons for 10 threads of 60 chunks, growing with the square of a batch. Hash
-- joins do it in one pass however many rows there are (and spill to disk if they must).
SELECT set_config('enable_nestloop', 'off', true)

-- name: snapshot_blobs_gc
-- Blobs that no remaining snapshot of their namespace references. One statement, one snapshot of the
-- data: a put that commits meanwhile brings its snapshot and its blobs together, so neither is seen.
-- The bases a used blob extends are used too (bases are stored whole: one level).
WITH direct AS MATERIALIZED (
    SELECT DISTINCT s.conversation_id, s.namespace, v.channel, v.version
    FROM {schema}.snapshots s
    CROSS JOIN LATERAL jsonb_each_text(s.channel_versions) AS v(channel, version)
    WHERE s.tenant_id = %(tenant)s AND s.conversation_id = ANY(%(conversation_ids)s::text[])
), used AS (
    SELECT * FROM direct
  UNION
    SELECT u.conversation_id, u.namespace, u.channel, b.base
    FROM direct u
    JOIN {schema}.snapshot_blobs b
      ON b.tenant_id = %(tenant)s AND b.conversation_id = u.conversation_id AND b.namespace = u.namespace
     AND b.channel = u.channel AND b.version = u.version
    WHERE b.base IS NOT NULL
)
DELETE FROM {schema}.snapshot_blobs b
WHERE b.tenant_id = %(tenant)s AND b.conversation_id = ANY(%(conversation_ids)s::text[])
  AND NOT EXISTS (SELECT 1 FROM used u
                  WHERE u.conversation_id = b.conversation_id AND u.namespace = b.namespace
                    AND u.channel = b.channel AND u.version = b.version)

-- name: snapshot_chunks_gc
WITH used AS (
    SELECT DISTINCT b.conversation_id, h.hash
    FROM {schema}.snapshot_blobs b
    CROSS JOIN LATERAL {schema}.hash_split(b.chunks) AS h(hash)
    WHERE b.tenant_id = %(tenant)s AND b.conversation_id = ANY(%(conversation_ids)s::text[])
)
DELETE FROM {schema}.snapshot_chunks c
WHERE c.tenant_id = %(tenant)s AND c.conversation_id = ANY(%(conversation_ids)s::text[])
  AND NOT EXISTS (SELECT 1 FROM used u WHERE u.conversation_id = c.conversation_id AND u.hash = c.hash)

-- name: snapshot_prune_heads
-- The head of every namespace with its metadata (which names the delta channels it has not snapshotted,
-- LangGraph DeltaChannel: their values live in the writes of ancestors, which keep_latest must keep).
SELECT DISTINCT ON (s.conversation_id, s.namespace) s.conversation_id, s.namespace,
       {schema}.id_text(s.snapshot_id), s.metadata::text
FROM {schema}.snapshots s
WHERE s.tenant_id = %(tenant)s AND s.conversation_id = ANY(%(conversation_ids)s::text[])
ORDER BY s.conversation_id, s.namespace, s.snapshot_id DESC

-- name: snapshot_prune_keep
-- Deletes, in each namespace read by snapshot_prune_heads, the snapshots older than its head that are
-- not kept, with their writes. A snapshot saved after the heads were read is newer than its head: kept.
WITH heads AS (
    SELECT h.conversation_id, h.namespace, {schema}.id_bytes(h.snapshot_id) AS snapshot_id
    FROM unnest(%(head_conversations)s::text[], %(head_namespaces)s::text[], %(head_ids)s::text[])
        AS h(conversation_id, namespace, snapshot_id)
), keep AS (
    SELECT k.conversation_id, k.namespace, {schema}.id_bytes(k.snapshot_id) AS snapshot_id
    FROM unnest(%(keep_conversations)s::text[], %(keep_namespaces)s::text[], %(keep_ids)s::text[])
        AS k(conversation_id, namespace, snapshot_id)
), gone AS (
    DELETE FROM {schema}.snapshots s
    USING heads h
    WHERE s.tenant_id = %(tenant)s AND s.conversation_id = h.conversation_id AND s.namespace = h.namespace
      AND s.snapshot_id < h.snapshot_id
      AND NOT EXISTS (SELECT 1 FROM keep k
                      WHERE k.conversation_id = s.conversation_id AND k.namespace = s.namespace
                        AND k.snapshot_id = s.snapshot_id)
    RETURNING s.conversation_id, s.namespace, s.snapshot_id
)
DELETE FROM {schema}.snapshot_writes w
USING gone
WHERE w.tenant_id = %(tenant)s AND w.conversation_id = gone.conversation_id AND w.namespace = gone.namespace
  AND w.snapshot_id = gone.snapshot_id

-- name: snapshot_purge
-- Every snapshot, blob, chunk and write of the conversations; the conversations themselves stay.
WITH s AS (
    DELETE FROM {schema}.snapshots s
    WHERE s.tenant_id = %(tenant)s AND s.conversation_id = ANY(%(conversation_ids)s::text[])
), b AS (
    DELETE FROM {schema}.snapshot_blobs b
    WHERE b.tenant_id = %(tenant)s AND b.conversation_id = ANY(%(conversation_ids)s::text[])
), c AS (
    DELETE FROM {schema}.snapshot_chunks c
    WHERE c.tenant_id = %(tenant)s AND c.conversation_id = ANY(%(conversation_ids)s::text[])
)
DELETE FROM {schema}.snapshot_writes w
WHERE w.tenant_id = %(tenant)s AND w.conversation_id = ANY(%(conversation_ids)s::text[])

-- name: snapshot_copy_conversation
-- The target gets the source's fields; nothing happens when the source does not exist.
INSERT INTO {schema}.conversations (tenant_id, id, app, framework, user_id, channel, status, metadata)
SELECT c.tenant_id, %(target)s, c.app, c.framework, c.user_id, c.channel, c.status, c.metadata
FROM {schema}.conversations c
WHERE c.tenant_id = %(tenant)s AND c.id = %(source)s
ON CONFLICT (tenant_id, id) DO NOTHING

-- name: snapshot_copy_chunks
INSERT INTO {schema}.snapshot_chunks (tenant_id, conversation_id, hash, data)
SELECT c.tenant_id, %(target)s, c.hash, c.data
FROM {schema}.snapshot_chunks c
WHERE c.tenant_id = %(tenant)s AND c.conversation_id = %(source)s
ON CONFLICT DO NOTHING

-- name: snapshot_copy_blobs
INSERT INTO {schema}.snapshot_blobs (tenant_id, conversation_id, namespace, channel, version, type, chunks, base)
SELECT b.tenant_id, %(target)s, b.namespace, b.channel, b.version, b.type, b.chunks, b.base
FROM {schema}.snapshot_blobs b
WHERE b.tenant_id = %(tenant)s AND b.conversation_id = %(source)s
ON CONFLICT DO NOTHING

-- name: snapshot_copy_snapshots
INSERT INTO {schema}.snapshots
    (tenant_id, conversation_id, namespace, snapshot_id, parent_id, run_id, type, data, metadata,
     channel_versions, created_at, forked)
SELECT s.tenant_id, %(target)s, s.namespace, s.snapshot_id, s.parent_id, s.run_id, s.type, s.data, s.metadata,
       s.channel_versions, s.created_at, s.forked
FROM {schema}.snapshots s
WHERE s.tenant_id = %(tenant)s AND s.conversation_id = %(source)s
ON CONFLICT DO NOTHING

-- name: snapshot_copy_writes
INSERT INTO {schema}.snapshot_writes
    (tenant_id, conversation_id, namespace, snapshot_id, task_id, idx, channel, type, data, task_path)
SELECT w.tenant_id, %(target)s, w.namespace, w.snapshot_id, w.task_id, w.idx, w.channel, w.type, w.data,
       w.task_path
FROM {schema}.snapshot_writes w
WHERE w.tenant_id = %(tenant)s AND w.conversation_id = %(source)s
ON CONFLICT DO NOTHING

-- Copies of encrypted conversations: ciphertexts are bound to their conversation, so the rows are read,
-- sealed again for the target by the caller and inserted (see ops/snapshots.py copy()).

-- name: snapshot_copy_read_chunks
SELECT {schema}.hash_text(c.hash), c.data FROM {schema}.snapshot_chunks c
WHERE c.tenant_id = %(tenant)s AND c.conversation_id = %(conversation_id)s

-- name: snapshot_copy_read_blobs
SELECT b.namespace, b.channel, b.version, b.type, {schema}.hash_text(b.chunks), b.base FROM {schema}.snapshot_blobs b
WHERE b.tenant_id = %(tenant)s AND b.conversation_id = %(conversation_id)s

-- name: snapshot_copy_read_snapshots
SELECT s.namespace, {schema}.id_text(s.snapshot_id), {schema}.id_text(s.parent_id), s.run_id, s.type, s.data,
       s.metadata::text, s.channel_versions::text, s.created_at, s.forked
FROM {schema}.snapshots s
WHERE s.tenant_id = %(tenant)s AND s.conversation_id = %(conversation_id)s

-- name: snapshot_copy_read_writes
SELECT w.namespace, {schema}.id_text(w.snapshot_id), {schema}.id_text(w.task_id), w.idx, w.channel, w.type, w.data,
       w.task_path
FROM {schema}.snapshot_writes w
WHERE w.tenant_id = %(tenant)s AND w.conversation_id = %(conversation_id)s

-- name: snapshot_copy_insert_chunks
INSERT INTO {schema}.snapshot_chunks (tenant_id, conversation_id, hash, data)
SELECT %(tenant)s, %(target)s, {schema}.hash_bytes(x.hash), x.data
FROM unnest(%(hashes)s::text[], %(datas)s::bytea[]) AS x(hash, data)
ON CONFLICT DO NOTHING

-- name: snapshot_copy_insert_blobs
INSERT INTO {schema}.snapshot_blobs (tenant_id, conversation_id, namespace, channel, version, type, chunks, base)
SELECT %(tenant)s, %(target)s, x.namespace, x.channel, x.version, x.type, {schema}.hash_bytes(replace(x.chunks, ' ', '')),
       x.base
FROM unnest(%(namespaces)s::text[], %(channels)s::text[], %(versions)s::text[], %(types)s::text[],
            %(chunk_lists)s::text[], %(bases)s::text[]) AS x(namespace, channel, version, type, chunks, base)
ON CONFLICT DO NOTHING

-- name: snapshot_copy_insert_snapshots
INSERT INTO {schema}.snapshots
    (tenant_id, conversation_id, namespace, snapshot_id, parent_id, run_id, type, data, metadata,
     channel_versions, created_at, forked)
SELECT %(tenant)s, %(target)s, x.namespace, {schema}.id_bytes(x.snapshot_id), {schema}.id_bytes(x.parent_id), x.run_id,
       x.type, x.data, x.metadata::jsonb,
       x.channel_versions::jsonb, x.created_at, x.forked
FROM unnest(%(namespaces)s::text[], %(snapshot_ids)s::text[], %(parent_ids)s::text[], %(run_ids)s::text[],
            %(types)s::text[], %(datas)s::bytea[], %(metadatas)s::text[], %(channel_versions)s::text[],
            %(created)s::timestamptz[], %(forked)s::bool[])
     AS x(namespace, snapshot_id, parent_id, run_id, type, data, metadata, channel_versions, created_at, forked)
ON CONFLICT DO NOTHING

-- name: snapshot_copy_insert_writes
INSERT INTO {schema}.snapshot_writes
    (tenant_id, conversation_id, namespace, snapshot_id, task_id, idx, channel, type, data, task_path)
SELECT %(tenant)s, %(target)s, x.namespace, {schema}.id_bytes(x.snapshot_id), {schema}.id_bytes(x.task_id), x.idx,
       x.channel, x.type, x.data, x.task_path
FROM unnest(%(namespaces)s::text[], %(snapshot_ids)s::text[], %(task_ids)s::text[], %(idxs)s::int[],
            %(channels)s::text[], %(types)s::text[], %(datas)s::bytea[], %(task_paths)s::text[])
     AS x(namespace, snapshot_id, task_id, idx, channel, type, data, task_path)
ON CONFLICT DO NOTHING

-- Key rotation (ops/rotation.py) of the snapshot columns that hold ciphertexts: keyset pages in primary
-- key order ("first" marks the first page) and compare-and-swap writes, as in rotation.sql.

-- name: rot_snapshot_metadata_page
SELECT s.tenant_id, s.conversation_id, s.namespace, {schema}.id_text(s.snapshot_id), s.metadata::text
FROM {schema}.snapshots s
WHERE (%(tenant)s::text IS NULL OR s.tenant_id = %(tenant)s)
  AND (%(first)s OR (s.tenant_id, s.conversation_id, s.namespace, s.snapshot_id)
                    > (%(k0)s::text, %(k1)s::text, %(k2)s::text, {schema}.id_bytes(%(k3)s::text)))
ORDER BY s.tenant_id, s.conversation_id, s.namespace, s.snapshot_id
LIMIT %(limit)s

-- name: rot_snapshot_metadata_set
UPDATE {schema}.snapshots s SET metadata = %(new)s::jsonb
WHERE s.tenant_id = %(k0)s AND s.conversation_id = %(k1)s AND s.namespace = %(k2)s
  AND s.snapshot_id = {schema}.id_bytes(%(k3)s)
  AND s.metadata::text = %(old)s

-- name: rot_snapshot_data_page
SELECT s.tenant_id, s.conversation_id, s.namespace, {schema}.id_text(s.snapshot_id), s.data
FROM {schema}.snapshots s
WHERE (%(tenant)s::text IS NULL OR s.tenant_id = %(tenant)s)
  AND (%(first)s OR (s.tenant_id, s.conversation_id, s.namespace, s.snapshot_id)
                    > (%(k0)s::text, %(k1)s::text, %(k2)s::text, {schema}.id_bytes(%(k3)s::text)))
ORDER BY s.tenant_id, s.conversation_id, s.namespace, s.snapshot_id
LIMIT %(limit)s

-- name: rot_snapshot_data_set
UPDATE {schema}.snapshots s SET data = %(new)s
WHERE s.tenant_id = %(k0)s AND s.conversation_id = %(k1)s AND s.namespace = %(k2)s
  AND s.snapshot_id = {schema}.id_bytes(%(k3)s)
  AND s.data = %(old)s

-- name: rot_snapshot_chunks_page
SELECT c.tenant_id, c.conversation_id, {schema}.hash_text(c.hash), c.data
FROM {schema}.snapshot_chunks c
WHERE (%(tenant)s::text IS NULL OR c.tenant_id = %(tenant)s)
  AND (%(first)s OR (c.tenant_id, c.conversation_id, c.hash)
                    > (%(k0)s::text, %(k1)s::text, {schema}.hash_bytes(%(k2)s::text)))
ORDER BY c.tenant_id, c.conversation_id, c.hash
LIMIT %(limit)s

-- name: rot_snapshot_chunks_set
UPDATE {schema}.snapshot_chunks c SET data = %(new)s
WHERE c.tenant_id = %(k0)s AND c.conversation_id = %(k1)s AND c.hash = {schema}.hash_bytes(%(k2)s)
  AND c.data = %(old)s

-- name: rot_snapshot_writes_page
SELECT w.tenant_id, w.conversation_id, w.namespace, {schema}.id_text(w.snapshot_id), {schema}.id_text(w.task_id), w.idx,
       w.channel, w.type, w.data
FROM {schema}.snapshot_writes w
WHERE (%(tenant)s::text IS NULL OR w.tenant_id = %(tenant)s)
  AND (%(first)s OR (w.tenant_id, w.conversation_id, w.namespace, w.snapshot_id, w.task_id, w.idx)
                    > (%(k0)s::text, %(k1)s::text, %(k2)s::text, {schema}.id_bytes(%(k3)s::text),
                       {schema}.id_bytes(%(k4)s::text), %(k5)s::int))
ORDER BY w.tenant_id, w.conversation_id, w.namespace, w.snapshot_id, w.task_id, w.idx
LIMIT %(limit)s

-- name: rot_snapshot_writes_set
UPDATE {schema}.snapshot_writes w SET data = %(new)s
WHERE w.tenant_id = %(k0)s AND w.conversation_id = %(k1)s AND w.namespace = %(k2)s
  AND w.snapshot_id = {schema}.id_bytes(%(k3)s) AND w.task_id = {schema}.id_bytes(%(k4)s) AND w.idx = %(k5)s
  AND w.data = %(old)s
