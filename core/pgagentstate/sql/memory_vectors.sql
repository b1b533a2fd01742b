-- Long-term memory with embeddings (see pgagentstate.embedding and pgagentstate.ops.memory).
-- Placeholders replaced by the core before a statement is prepared (never by user input):
--   {dims}       the index's dimensions;
--   {ann_dist}   distance between v.embedding and the query, in the form an ANN index serves;
--   {exact_dist} the same distance, computed exactly (pgvector's operator, or memory_dot without it);
--   {score}      the score of a distance `dist` (higher is closer).
-- The query vector is %(qvec)b (float8[]), its norm %(qnorm)s.

-- name: memory_vector_hashes
-- What is embedded already for these items: an unchanged text is not embedded again.
-- %(items)s: a JSON array of [ns_path, key] rows (see memory_write_indexed). One primary-key probe per
-- item (a subquery kept apart by OFFSET 0): as a join, the generic plan a connection made while the table
-- was small read every embedding of the tenant once it had grown (tests/core/test_memory_vectors.py).
SELECT v.ns_path, v.key, v.field, v.text_hash, v.dims, v.sealed IS NOT NULL
FROM jsonb_array_elements(%(items)s::jsonb) AS x(r)
CROSS JOIN LATERAL (
    SELECT v.ns_path, v.key, v.field, v.text_hash, v.dims, v.sealed FROM {schema}.memory_vectors v
    WHERE v.tenant_id = %(tenant)s AND v.ns_path = x.r->>0 AND v.key = x.r->>1
    OFFSET 0) AS v

-- name: memory_write_indexed
-- Items and their embeddings in one statement. Items (x, %(items)s): one JSON row each, [ns_path, key,
-- value, terms, kept], first stored in the order given; %(expected)s (single item only) as for
-- memory_put/memory_cas, %(if_absent)s as for memory_put_many. Fields (f, %(fields)s): one JSON row per
-- field the new values embed, [ns_path, key, field, hash, slot, norm, sealed] (bytes as base64, the norm
-- as text); `slot` points into %(flat)b (dims floats per slot) for a changed text, `sealed` holds it for
-- a store that seals them; a row with neither keeps the stored embedding. x.kept counts an item's kept
-- fields: if one of them no longer holds the text we compared (a concurrent writer), the item is written
-- unindexed rather than with another text's embedding. Stored fields the new value does not embed are
-- deleted. Rows travel as jsonb, not as one array per column: a custom plan counts the rows of unnest()
-- over an array it is given (1 for a one-item put) where the generic plan guesses 10, so the generic plan
-- looked costlier and the statement was planned again on every call (0.48 ms a put at 10k memories);
-- jsonb_array_elements() is estimated the same either way.
WITH x AS (
    SELECT t.r->>0 AS ns_path, t.r->>1 AS key, t.r->2 AS value, (t.r->>3)::tsvector AS terms,
           (t.r->>4)::int AS kept, t.ord
    FROM jsonb_array_elements(%(items)s::jsonb) WITH ORDINALITY AS t(r, ord)
), f AS (
    SELECT t.r->>0 AS ns_path, t.r->>1 AS key, t.r->>2 AS field, decode(t.r->>3, 'base64') AS hash,
           (t.r->>4)::int AS slot, (t.r->>5)::float8::real AS norm, decode(t.r->>6, 'base64') AS sealed
    FROM jsonb_array_elements(%(fields)s::jsonb) AS t(r)
), checked AS (
    SELECT x.*, x.kept = (SELECT count(*) FROM f JOIN {schema}.memory_vectors v
                          ON v.tenant_id = %(tenant)s AND v.ns_path = f.ns_path AND v.key = f.key
                             AND v.field = f.field AND v.text_hash = f.hash AND v.dims = %(dims)s
                          WHERE f.ns_path = x.ns_path AND f.key = x.key AND f.slot IS NULL AND f.sealed IS NULL)
                AS intact
    FROM x
), up AS (
    INSERT INTO {schema}.memories AS m
        (tenant_id, ns_path, key, namespace, user_id, value, search, ttl_seconds, expires_at, indexed)
    SELECT %(tenant)s, c.ns_path, c.key, string_to_array(left(c.ns_path, -1), chr(31)), %(user_id)s, c.value,
           c.terms, %(ttl)s, now() + make_interval(secs => %(ttl)s), c.intact
    FROM checked c
    -- (SELECT ...): an InitPlan, which planning cannot fold away as it would a constant (then every call
    -- without %(expected)s looked cheaper planned for its values than the generic plan, and was re-planned)
    WHERE coalesce((SELECT %(expected)s::bigint), 0) = 0
       OR EXISTS (SELECT 1 FROM {schema}.memories e
                  WHERE e.tenant_id = %(tenant)s AND e.ns_path = c.ns_path AND e.key = c.key)
    ORDER BY c.ord
    ON CONFLICT (tenant_id, ns_path, key) DO UPDATE
    SET value = EXCLUDED.value, search = EXCLUDED.search, user_id = EXCLUDED.user_id,
        ttl_seconds = EXCLUDED.ttl_seconds, expires_at = EXCLUDED.expires_at, updated_at = now(),
        indexed = EXCLUDED.indexed,
        -- an expired row is gone as far as readers know: overwriting it starts again at version 1
        version = CASE WHEN m.expires_at <= now() THEN 1 ELSE m.version + 1 END,
        created_at = CASE WHEN m.expires_at <= now() THEN now() ELSE m.created_at END
    WHERE CASE WHEN %(expected)s::bigint IS NULL
               THEN NOT %(if_absent)s OR (m.expires_at IS NOT NULL AND m.expires_at <= now())
               WHEN %(expected)s = 0 THEN m.expires_at IS NOT NULL AND m.expires_at <= now()
               ELSE m.version = %(expected)s AND (m.expires_at IS NULL OR m.expires_at > now()) END
    RETURNING m.ns_path, m.key, m.namespace, m.value, m.user_id, m.version, m.created_at, m.updated_at,
              m.expires_at
), gone AS (
    DELETE FROM {schema}.memory_vectors v USING up
    WHERE v.tenant_id = %(tenant)s AND v.ns_path = up.ns_path AND v.key = up.key
      AND NOT EXISTS (SELECT 1 FROM f WHERE f.ns_path = v.ns_path AND f.key = v.key AND f.field = v.field)
), put AS (
    INSERT INTO {schema}.memory_vectors AS v (tenant_id, ns_path, key, field, text_hash, dims, norm, embedding, sealed)
    SELECT %(tenant)s, f.ns_path, f.key, f.field, f.hash, %(dims)s, f.norm,
           (%(flat)b::float8[])[f.slot * %(dims)s + 1 : (f.slot + 1) * %(dims)s]::real[], f.sealed
    FROM f JOIN up ON up.ns_path = f.ns_path AND up.key = f.key
    WHERE f.slot IS NOT NULL OR f.sealed IS NOT NULL
    ON CONFLICT (tenant_id, ns_path, key, field) DO UPDATE
    SET text_hash = EXCLUDED.text_hash, dims = EXCLUDED.dims, norm = EXCLUDED.norm,
        embedding = EXCLUDED.embedding, sealed = EXCLUDED.sealed
)
SELECT up.namespace, up.key, up.value::text, up.user_id, up.version, up.created_at, up.updated_at,
       up.expires_at, NULL::real
FROM up

-- name: memory_ann_settings
-- Candidates an approximate search examines (pgvector returns at most ef_search rows per HNSW scan), and
-- a plan made for this search's values: the generic plan of a prepared search guesses that a namespace
-- range holds 0.5% of the rows, so that the index would have to be walked far to fill a page, and ranks
-- every row instead (10k rows: 220 ms instead of 12; planning each search costs ~1 ms).
SELECT set_config('hnsw.ef_search', {_memory_ef_search}, true), set_config('ivfflat.probes', %(probes)s, true),
       set_config('plan_cache_mode', 'force_custom_plan', true)

-- name: _memory_ef_search
-- (A fragment.) hnsw.ef_search for a search, as text: %(ef_search)s when the index names it, else scaled
-- to the embeddings stored, 48 x (rows / 10,000)^0.6 and at least pgvector's default 40 -- an HNSW graph
-- of more rows needs more candidates for the same recall: on benchmarks/bench_memory.py's clustered 384-dim
-- data recall@10 was 0.962-0.970 at ef 48 with 10k rows and, with 100k rows, 0.943-0.948 at ef 152 (the
-- square root's figure), 0.952 at 176, 0.960 at 190-200. The row count is the planner's estimate (pg_class.reltuples, kept by autovacuum's ANALYZE): no
-- count per search. At least the rows the page needs (%(ann_limit)s), at most pgvector's maximum, 1000.
least(1000, greatest(%(ann_limit)s, coalesce(%(ef_search)s::int, (
    SELECT greatest(40, ceil(48 * power(greatest(c.reltuples, 0) / 10000, 0.6)))::int
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = %(schema_name)s AND c.relname = 'memory_vectors'
), 40)))::text

-- name: memory_ef_search
-- The hnsw.ef_search a search of %(ann_limit)s rows would set (for tests and benchmarks).
SELECT {_memory_ef_search}

-- name: _memory_nearest
-- (A fragment: see queries.py.) CTE `nearest`: the %(depth)s items in scope nearest by meaning, with their
-- distance. `ann_hits`: the index's nearest embeddings of the tenant, joined and filtered (namespace,
-- filters, expiry) as they come, so the scan stops at %(ann_limit)s passing rows (needed items x embedded
-- fields) and never reads more than the hnsw.ef_search candidates pgvector returns; when fewer than
-- %(depth)s items pass (a selective filter, a small namespace in a large table), `exact` ranks every
-- embedding that passes them instead, so a filter never loses a result the way a filtered HNSW scan does.
-- Without an ANN index (%(ann)s false), only `exact`.
ann_hits AS MATERIALIZED (
    SELECT a.ns_path, a.key, min(a.dist) AS dist
    FROM (
        SELECT v.ns_path, v.key, {ann_dist} AS dist
        FROM {schema}.memory_vectors v
        JOIN {schema}.memories m ON m.tenant_id = v.tenant_id AND m.ns_path = v.ns_path AND m.key = v.key
        WHERE %(ann)s AND v.dims = {dims} AND v.tenant_id = %(tenant)s
          AND {_memory_scope}
          AND m.indexed
        ORDER BY {ann_dist}
        LIMIT %(ann_limit)s
    ) a
    GROUP BY a.ns_path, a.key
), {_memory_exact}

-- name: _memory_exact
-- (A fragment.) CTEs `exact` and `nearest`, after a CTE `ann_hits` (the approximate search's items and
-- distances): `nearest` is `ann_hits` when it holds %(depth)s items, else every item in scope ranked exactly.
exact AS (
    SELECT m.ns_path, m.key, min({exact_dist}) AS dist
    FROM {schema}.memories m
    JOIN {schema}.memory_vectors v ON v.tenant_id = m.tenant_id AND v.ns_path = m.ns_path AND v.key = m.key
    WHERE (SELECT count(*) FROM ann_hits) < %(depth)s
      AND {_memory_scope}
      AND m.indexed AND v.dims = {dims} AND v.embedding IS NOT NULL
    GROUP BY m.ns_path, m.key
    ORDER BY dist, m.ns_path, m.key
    LIMIT %(depth)s
), nearest AS (
    SELECT * FROM ann_hits WHERE (SELECT count(*) FROM ann_hits) >= %(depth)s
    UNION ALL
    SELECT * FROM exact
)

-- name: _memory_nearest_page
-- (A fragment.) A page of the items in CTE `nearest`, nearest first (TTLs refreshed), as search results.
hits AS (
    SELECT m.ns_path, m.key, m.namespace, m.value, m.user_id, m.version, m.created_at, m.updated_at,
           m.expires_at, m.ttl_seconds, m.seq, r.dist
    FROM nearest r
    JOIN {schema}.memories m ON m.tenant_id = %(tenant)s AND m.ns_path = r.ns_path AND m.key = r.key
    ORDER BY r.dist, m.seq
    LIMIT %(limit)s OFFSET %(offset)s
), {_memory_refresh}
SELECT hits.namespace, hits.key, hits.value::text, hits.user_id, hits.version, hits.created_at,
       hits.updated_at, hits.expires_at, ({score})::real
FROM hits
ORDER BY hits.dist, hits.seq

-- name: memory_search_vector
-- Nearest items by meaning (%(depth)s is limit + offset), planned for each call's values (see
-- memory_ann_settings).
WITH {_memory_nearest}, {_memory_nearest_page}

-- name: memory_search_hnsw
-- Nearest items by meaning in a namespace prefix, without filters, through the HNSW index: one statement
-- that is prepared and planned once. `c`: the tenant's nearest embeddings, as many as pgvector returns at
-- the hnsw.ef_search this statement sets (_memory_ef_search) -- in an InitPlan, which runs when the scan is
-- first asked for a row, before pgvector reads the setting: no SET statement and no transaction around
-- the search. Each is checked against its item (namespace, expiry, indexed) by its primary key, nearest
-- first, until %(ann_limit)s pass. Written so, the generic plan is the one a custom plan would choose:
-- memory_search_vector's filtered scan, planned generically, guesses that the namespace holds 0.5% of the
-- rows and ranks every row instead (see memory_ann_settings), and planning it for each call costs ~1 ms,
-- a third of a search at 10k items.
WITH ann_hits AS MATERIALIZED (
    SELECT a.ns_path, a.key, min(a.dist) AS dist
    FROM (
        SELECT c.ns_path, c.key, c.dist
        FROM (
            -- a subquery, not a CTE: a CTE calling set_config would be computed whole before the join
            SELECT v.ns_path, v.key, {ann_dist} AS dist
            FROM {schema}.memory_vectors v
            WHERE v.dims = {dims} AND v.tenant_id = %(tenant)s
              AND (SELECT set_config('hnsw.ef_search', {_memory_ef_search}, true)) IS NOT NULL
            ORDER BY {ann_dist}
            LIMIT 1000
        ) c
        CROSS JOIN LATERAL (
            -- LIMIT 1: a lookup by primary key for each candidate, also in the generic plan (which would
            -- otherwise read the whole namespace's range once, guessing it holds one row)
            SELECT FROM {schema}.memories m
            WHERE m.ns_path = c.ns_path AND m.key = c.key AND {_memory_scope}
              AND m.indexed
            LIMIT 1
        ) live
        ORDER BY c.dist
        LIMIT %(ann_limit)s
    ) a
    GROUP BY a.ns_path, a.key
), {_memory_exact}, {_memory_nearest_page}

-- name: memory_search_hybrid
-- Meaning and words together: the %(depth)s nearest items (as memory_search_vector) and the %(depth)s items
-- matching most query words (as memory_search), fused by reciprocal rank:
-- score = 1/(60 + rank by meaning) + 1/(60 + rank by words), a missing rank adding nothing. Equal scores
-- come in the order first stored.
WITH {_memory_nearest}, by_meaning AS (
    SELECT r.ns_path, r.key, row_number() OVER (ORDER BY r.dist, r.ns_path, r.key) AS rank
    FROM nearest r
), by_words AS (
    -- Words are counted for the first %(word_scan)s items (in the order stored) that match any query
    -- word, not for every one: a common word matches thousands of items at 100k, and counting each
    -- one's words was most of a search's time. Fewer matches than that: every one is counted.
    SELECT w.ns_path, w.key, row_number() OVER (ORDER BY w.matched DESC, w.seq) AS rank
    FROM (
        SELECT c.ns_path, c.key, c.seq,
               (SELECT count(*) FROM unnest(%(words)s::tsquery[]) q WHERE c.search @@ q) AS matched
        FROM (
            SELECT m.ns_path, m.key, m.seq, m.search
            FROM {schema}.memories m
            WHERE m.search @@ %(tsq)s::tsquery
              AND {_memory_scope}
            ORDER BY m.seq
            LIMIT %(word_scan)s
        ) c
        ORDER BY matched DESC, c.seq
        LIMIT %(depth)s
    ) w
), fused AS (
    SELECT coalesce(a.ns_path, b.ns_path) AS ns_path, coalesce(a.key, b.key) AS key,
           coalesce(1.0 / (60 + a.rank), 0) + coalesce(1.0 / (60 + b.rank), 0) AS score
    FROM by_meaning a FULL JOIN by_words b ON a.ns_path = b.ns_path AND a.key = b.key
), hits AS (
    SELECT m.ns_path, m.key, m.namespace, m.value, m.user_id, m.version, m.created_at, m.updated_at,
           m.expires_at, m.ttl_seconds, m.seq, f.score
    FROM fused f
    JOIN {schema}.memories m ON m.tenant_id = %(tenant)s AND m.ns_path = f.ns_path AND m.key = f.key
    ORDER BY f.score DESC, m.seq
    LIMIT %(limit)s OFFSET %(offset)s
), {_memory_refresh}
SELECT hits.namespace, hits.key, hits.value::text, hits.user_id, hits.version, hits.created_at,
       hits.updated_at, hits.expires_at, hits.score::real
FROM hits
ORDER BY hits.score DESC, hits.seq

-- name: memory_search_local
-- Candidates for a search ranked by the client (an encrypted store): every live item under the prefix,
-- with its sealed embeddings (fields and ciphertexts) and its plain ones of these dimensions. (%(filter)s
-- is NULL: the client filters the decrypted values.)
SELECT m.namespace, m.key, m.value::text, m.user_id, m.version, m.created_at, m.updated_at, m.expires_at,
       NULL::real, m.indexed, coalesce(s.fields, '{}'), coalesce(s.sealed, '{}'), coalesce(p.plain, '{}'), m.seq
FROM {schema}.memories m
LEFT JOIN LATERAL (
    SELECT array_agg(v.field ORDER BY v.field) AS fields, array_agg(v.sealed ORDER BY v.field) AS sealed
    FROM {schema}.memory_vectors v
    WHERE v.tenant_id = m.tenant_id AND v.ns_path = m.ns_path AND v.key = m.key
      AND v.dims = %(dims)s AND v.sealed IS NOT NULL
) s ON true
LEFT JOIN LATERAL (
    SELECT array_agg(v.embedding ORDER BY v.field) AS plain
    FROM {schema}.memory_vectors v
    WHERE v.tenant_id = m.tenant_id AND v.ns_path = m.ns_path AND v.key = m.key
      AND v.dims = %(dims)s AND v.embedding IS NOT NULL
) p ON true
WHERE {_memory_scope}
ORDER BY m.seq

-- name: memory_refresh_ttl
-- Push out the expiry of the items a client-side search returned; rows a writer holds are skipped, as
-- in memory_search (never waiting is what keeps refreshes out of deadlocks).
WITH refreshable AS (
    SELECT m.ns_path, m.key FROM {schema}.memories m
    JOIN unnest(%(ns_paths)s::text[], %(keys)s::text[]) AS x(ns_path, key) ON m.ns_path = x.ns_path AND m.key = x.key
    WHERE m.tenant_id = %(tenant)s AND m.ttl_seconds IS NOT NULL AND (m.expires_at IS NULL OR m.expires_at > now())
    FOR UPDATE OF m SKIP LOCKED
)
UPDATE {schema}.memories m SET expires_at = now() + make_interval(secs => m.ttl_seconds)
FROM refreshable r
WHERE m.tenant_id = %(tenant)s AND m.ns_path = r.ns_path AND m.key = r.key

-- name: memory_vector_mode
-- What the server offers for search by meaning: pgvector's version (NULL: not installed or not on the
-- search path), whether halfvec exists (pgvector >= 0.7), whether the configured ANN index exists as a
-- vector index or as a halfvec one, and whether the server could install pgvector.
SELECT (SELECT e.extversion FROM pg_extension e WHERE e.extname = 'vector' AND to_regtype('vector') IS NOT NULL),
       to_regtype('halfvec') IS NOT NULL,
       to_regclass(format('%%I.%%I', %(schema_name)s::text, %(vector_index)s::text)) IS NOT NULL,
       to_regclass(format('%%I.%%I', %(schema_name)s::text, %(halfvec_index)s::text)) IS NOT NULL,
       EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'vector')

-- name: memory_create_extension
-- pgvector when the server has it and this role may create it; otherwise search stays exact.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'vector')
       AND EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'vector') THEN
        BEGIN
            CREATE EXTENSION vector;
        EXCEPTION WHEN insufficient_privilege THEN
            RAISE NOTICE 'pgagentstate: not allowed to create the vector extension; memory search is exact';
        END;
    END IF;
END $$

-- name: memory_create_ann_index
CREATE INDEX IF NOT EXISTS {index} ON {schema}.memory_vectors
    USING {method} ((embedding::{vtype}({dims})) {opclass}) {with}
    WHERE dims = {dims}
