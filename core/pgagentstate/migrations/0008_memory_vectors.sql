-- Embeddings of memories (see pgagentstate.embedding): one row per embedded field of an item.
-- embedding is real[] on every server, so the schema is the same with and without pgvector; with pgvector,
-- setup() adds an HNSW/IVFFlat index on (embedding::vector(dims)) for the configured index (partial on
-- dims), and searches order by that expression. Without pgvector, searches are exact (memory_dot).
-- An encrypted store that seals its embeddings keeps them in `sealed` (embedding and norm stay NULL).
CREATE TABLE {schema}.memory_vectors (
    tenant_id text             NOT NULL,
    ns_path   text COLLATE "C" NOT NULL,
    key       text             NOT NULL,
    field     text             NOT NULL,
    -- what tells an unchanged text: it is never embedded twice (a keyed digest in encrypted stores)
    text_hash bytea            NOT NULL,
    dims      integer          NOT NULL,
    norm      real,
    embedding real[],
    sealed    bytea,
    PRIMARY KEY (tenant_id, ns_path, key, field),
    FOREIGN KEY (tenant_id, ns_path, key) REFERENCES {schema}.memories (tenant_id, ns_path, key) ON DELETE CASCADE
);
-- Floats do not compress: skip the attempt (768 dimensions and up would be tried on every write).
ALTER TABLE {schema}.memory_vectors ALTER COLUMN embedding SET STORAGE EXTERNAL;
ALTER TABLE {schema}.memory_vectors ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON {schema}.memory_vectors
    USING (tenant_id = current_setting('pgagentstate.tenant', true));

-- True when the item's memory_vectors rows belong to its current value: a store without an index (or a
-- write that lost a race for the same field) leaves false, and searches by meaning skip the item's
-- vectors until it is written again through an index.
ALTER TABLE {schema}.memories ADD COLUMN indexed boolean NOT NULL DEFAULT false;

-- The dot product without pgvector (exact search): about 55 us per 384-dimension row on PG15 here.
CREATE FUNCTION {schema}.memory_dot(a real[], b double precision[]) RETURNS double precision
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS 'SELECT sum(x * y) FROM unnest(a, b) AS t(x, y)';
