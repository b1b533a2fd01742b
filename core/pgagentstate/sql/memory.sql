-- Long-term memory. Columns returned: namespace, key, value, user_id, version, created_at, updated_at,
-- expires_at, score. Expired rows are invisible to every read even before gc removes them. Writes here
-- come from a store without a memory index: they leave `indexed` false, so embeddings an indexed store
-- wrote for an older value are not used (see memory_vectors.sql).

-- name: memory_put
WITH up AS (
    INSERT INTO {schema}.memories AS m
        (tenant_id, ns_path, key, namespace, user_id, value, search, ttl_seconds, expires_at)
    SELECT %(tenant)s, %(ns_path)s, %(key)s, %(namespace)s::text[], %(user_id)s, %(value)s::jsonb,
           %(terms)s::tsvector, %(ttl)s, now() + make_interval(secs => %(ttl)s)
    WHERE %(expected_version)s::bigint IS NULL OR %(expected_version)s = 0
    ON CONFLICT (tenant_id, ns_path, key) DO UPDATE
    SET value = EXCLUDED.value, search = EXCLUDED.search, user_id = EXCLUDED.user_id, indexed = false,
        ttl_seconds = EXCLUDED.ttl_seconds,
        expires_at = EXCLUDED.expires_at, updated_at = now(),
        -- an expired row is gone as far as readers know: overwriting it starts again at version 1
        version = CASE WHEN m.expires_at <= now() THEN 1 ELSE m.version + 1 END,
        created_at = CASE WHEN m.expires_at <= now() THEN now() ELSE m.created_at END
    WHERE %(expected_version)s::bigint IS NULL OR (m.expires_at IS NOT NULL AND m.expires_at <= now())
    RETURNING m.namespace, m.key, m.value::text, m.user_id, m.version, m.created_at, m.updated_at, m.expires_at
)
SELECT up.*, NULL::real FROM up

-- name: memory_cas
UPDATE {schema}.memories m
SET value = %(value)s::jsonb, search = %(terms)s::tsvector, user_id = %(user_id)s, ttl_seconds = %(ttl)s,
    indexed = false,
    expires_at = now() + make_interval(secs => %(ttl)s), updated_at = now(), version = m.version + 1
WHERE m.tenant_id = %(tenant)s AND m.ns_path = %(ns_path)s AND m.key = %(key)s AND m.version = %(expected_version)s
  AND (m.expires_at IS NULL OR m.expires_at > now())
RETURNING m.namespace, m.key, m.value::text, m.user_id, m.version, m.created_at, m.updated_at, m.expires_at,
          NULL::real

-- name: memory_version
SELECT m.version FROM {schema}.memories m
WHERE m.tenant_id = %(tenant)s AND m.ns_path = %(ns_path)s AND m.key = %(key)s
  AND (m.expires_at IS NULL OR m.expires_at > now())

-- name: memory_get
WITH hit AS (
    SELECT m.ns_path, m.key, m.namespace, m.value, m.user_id, m.version, m.created_at, m.updated_at,
           m.expires_at, m.ttl_seconds
    FROM {schema}.memories m
    WHERE m.tenant_id = %(tenant)s AND m.ns_path = %(ns_path)s AND m.key = %(key)s
      AND (m.expires_at IS NULL OR m.expires_at > now())
), refreshed AS (
    UPDATE {schema}.memories m SET expires_at = now() + make_interval(secs => m.ttl_seconds)
    FROM hit
    WHERE %(refresh)s AND hit.ttl_seconds IS NOT NULL
      AND m.tenant_id = %(tenant)s AND m.ns_path = hit.ns_path AND m.key = hit.key
    RETURNING m.expires_at
)
SELECT hit.namespace, hit.key, hit.value::text, hit.user_id, hit.version, hit.created_at, hit.updated_at,
       coalesce((SELECT expires_at FROM refreshed), hit.expires_at), NULL::real
FROM hit

-- name: memory_delete
DELETE FROM {schema}.memories m
WHERE m.tenant_id = %(tenant)s AND m.ns_path = %(ns_path)s AND m.key = %(key)s
  AND (m.expires_at IS NULL OR m.expires_at > now())

-- name: _memory_scope
-- (A fragment: see queries.py.) The live items of alias m under a namespace prefix, filtered. The prefix is
-- a primary-key range; the other conditions are filters on what an index found.
m.tenant_id = %(tenant)s
      AND m.ns_path >= %(prefix_lo)s AND m.ns_path < %(prefix_hi)s
      AND (%(ns_regex)s::text IS NULL OR m.ns_path ~ %(ns_regex)s)
      AND (m.expires_at IS NULL OR m.expires_at > now())
      AND (%(user_id)s::text IS NULL OR m.user_id = %(user_id)s)
      AND (%(filter)s::jsonb IS NULL OR m.value @> %(filter)s::jsonb)

-- name: _memory_by_words
-- (A fragment.) The items in scope containing any of the query's words, most words first, equal counts in
-- the order first stored. %(tsq)s is the OR of the words (one tsquery each in %(words)s, see
-- pgagentstate.textsearch); it stands alone in the WHERE clause so that the GIN index on `search` can
-- serve it in every plan. Behind an `%(tsq)s IS NULL OR ...` it could not: a prepared statement's generic
-- plan then took the primary-key range and tested every item of the namespace (95 ms instead of 4 ms for a
-- rare word among one user's 100,000 memories on PG15; see docs/memory.md).
SELECT m.ns_path, m.key, m.namespace, m.value, m.user_id, m.version, m.created_at, m.updated_at,
       m.expires_at, m.ttl_seconds, m.seq,
       (SELECT count(*) FROM unnest(%(words)s::tsquery[]) w WHERE m.search @@ w) AS matched
FROM {schema}.memories m
WHERE m.search @@ %(tsq)s::tsquery
  AND {_memory_scope}
ORDER BY matched DESC, m.seq

-- name: _memory_refresh
-- (A fragment.) Push out the expiry of the items in CTE `hits` (%(refresh)s: a read that refreshes TTLs).
-- Refreshing never waits: rows a writer holds are skipped (its write sets their expiry anyway), and
-- a search that waited for a row while holding others deadlocked against writers and other searches.
refreshable AS (
    SELECT m.ns_path, m.key FROM {schema}.memories m JOIN hits ON m.ns_path = hits.ns_path AND m.key = hits.key
    WHERE %(refresh)s AND hits.ttl_seconds IS NOT NULL AND m.tenant_id = %(tenant)s
    FOR UPDATE OF m SKIP LOCKED
), refreshed AS (
    UPDATE {schema}.memories m SET expires_at = now() + make_interval(secs => m.ttl_seconds)
    FROM refreshable r
    WHERE m.tenant_id = %(tenant)s AND m.ns_path = r.ns_path AND m.key = r.key
)

-- name: memory_search
-- By words: an item ranks by the share of the query's words it contains.
WITH hits AS (
    {_memory_by_words}
    LIMIT %(limit)s OFFSET %(offset)s
), {_memory_refresh}
SELECT hits.namespace, hits.key, hits.value::text, hits.user_id, hits.version, hits.created_at,
       hits.updated_at, hits.expires_at, (hits.matched::real / cardinality(%(words)s::tsquery[]))::real
FROM hits
ORDER BY hits.matched DESC, hits.seq

-- name: memory_rank
-- Every item in scope, those with more of the query's words first (0 for none), equal ranks in the order
-- first stored: LangGraph's stores without an index ignore the query and return the namespace's items, so
-- ours orders them by it and leaves none out (a scan of the namespace's range, as a listing is).
WITH hits AS (
    SELECT m.ns_path, m.key, m.namespace, m.value, m.user_id, m.version, m.created_at, m.updated_at,
           m.expires_at, m.ttl_seconds, m.seq,
           (SELECT count(*) FROM unnest(%(words)s::tsquery[]) w WHERE m.search @@ w) AS matched
    FROM {schema}.memories m
    WHERE {_memory_scope}
    ORDER BY matched DESC, m.seq
    LIMIT %(limit)s OFFSET %(offset)s
), {_memory_refresh}
SELECT hits.namespace, hits.key, hits.value::text, hits.user_id, hits.version, hits.created_at,
       hits.updated_at, hits.expires_at, (hits.matched::real / cardinality(%(words)s::tsquery[]))::real
FROM hits
ORDER BY hits.matched DESC, hits.seq

-- name: memory_list
-- Without a query: the newest first, or, with %(added)s, in the order first stored (the encrypted path
-- ranks them in Python and keeps that order).
WITH hits AS (
    SELECT m.ns_path, m.key, m.namespace, m.value, m.user_id, m.version, m.created_at, m.updated_at,
           m.expires_at, m.ttl_seconds, m.seq
    FROM {schema}.memories m
    WHERE {_memory_scope}
    ORDER BY CASE WHEN NOT %(added)s THEN m.updated_at END DESC, m.seq
    LIMIT %(limit)s OFFSET %(offset)s
), {_memory_refresh}
SELECT hits.namespace, hits.key, hits.value::text, hits.user_id, hits.version, hits.created_at,
       hits.updated_at, hits.expires_at, NULL::real
FROM hits
ORDER BY CASE WHEN NOT %(added)s THEN hits.updated_at END DESC, hits.seq

-- name: memory_namespaces
SELECT DISTINCT CASE WHEN %(max_depth)s::int IS NULL THEN m.namespace
                     ELSE m.namespace[1:%(max_depth)s] END AS ns
FROM {schema}.memories m
WHERE m.tenant_id = %(tenant)s
  AND m.ns_path >= %(prefix_lo)s AND m.ns_path < %(prefix_hi)s
  AND (%(ns_regex)s::text IS NULL OR m.ns_path ~ %(ns_regex)s)
  AND (m.expires_at IS NULL OR m.expires_at > now())
ORDER BY ns
LIMIT %(limit)s OFFSET %(offset)s

-- name: memory_put_many
-- Many items in one statement, first stored in the order given. %(items)s: a JSON array of [ns_path,
-- key, value, terms] rows (jsonb, not arrays: see memory_write_indexed). %(if_absent)s: keep what is
-- stored (an expired item counts as absent). The namespace array is rebuilt from ns_path.
INSERT INTO {schema}.memories AS m
    (tenant_id, ns_path, key, namespace, user_id, value, search, ttl_seconds, expires_at)
SELECT %(tenant)s, x.r->>0, x.r->>1, string_to_array(left(x.r->>0, -1), chr(31)), %(user_id)s, x.r->2,
       (x.r->>3)::tsvector, %(ttl)s, now() + make_interval(secs => %(ttl)s)
FROM jsonb_array_elements(%(items)s::jsonb) WITH ORDINALITY AS x(r, ord)
ORDER BY x.ord
ON CONFLICT (tenant_id, ns_path, key) DO UPDATE
SET value = EXCLUDED.value, search = EXCLUDED.search, user_id = EXCLUDED.user_id, indexed = false,
    ttl_seconds = EXCLUDED.ttl_seconds, expires_at = EXCLUDED.expires_at, updated_at = now(),
    version = CASE WHEN m.expires_at <= now() THEN 1 ELSE m.version + 1 END,
    created_at = CASE WHEN m.expires_at <= now() THEN now() ELSE m.created_at END
WHERE NOT %(if_absent)s OR (m.expires_at IS NOT NULL AND m.expires_at <= now())
