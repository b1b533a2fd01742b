-- Snapshot storage in fewer bytes: ids and chunk hashes as raw bytes instead of text.
-- Checkpoint, parent and task ids are LangGraph UUIDs: 37 bytes as text, 17 as bytea (16 + a 1-byte
-- header). They appear in every snapshot and write row and in their index entries: 84 bytes less per
-- row. Chunk hashes are 96 bits written as 16 base64 characters, 20 bytes each in a text[]: 12 raw bytes
-- each, a list being their concatenation. Together -17% of a 50-turn LangGraph thread (docs/langgraph.md).
-- The statements convert at the edge (id_bytes/id_text, hash_bytes/hash_text): callers keep text.

-- A canonical lowercase UUID is its 16 bytes; any other id its UTF-8 bytes, with a NUL byte appended
-- when they are 16 bytes long (text holds no NUL, so no other id ends in one). Byte order is the text's
-- order for UUIDs and for other ids (C collation); only ids of the two kinds compare differently.
CREATE FUNCTION {schema}.id_bytes(t text) RETURNS bytea
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN t ~ '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'
            THEN decode(replace(t, '-', ''), 'hex')
        WHEN octet_length(t) = 16 THEN convert_to(t, 'UTF8') || '\x00'::bytea
        ELSE convert_to(t, 'UTF8')
    END
$$;

CREATE FUNCTION {schema}.id_text(b bytea) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN octet_length(b) = 16 THEN encode(b, 'hex')::uuid::text
        WHEN octet_length(b) = 17 AND get_byte(b, 16) = 0 THEN convert_from(substring(b FROM 1 FOR 16), 'UTF8')
        ELSE convert_from(b, 'UTF8')
    END
$$;

-- Chunk hashes: one or more 16-character base64url hashes, concatenated, to their 12-byte raw forms
-- (16 base64 characters are exactly 12 bytes, so a list converts in one call), and back.
CREATE FUNCTION {schema}.hash_bytes(t text) RETURNS bytea
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT decode(translate(t, '-_', '+/'), 'base64')
$$;

CREATE FUNCTION {schema}.hash_text(b bytea) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT translate(encode(b, 'base64'), E'+/\n', '-_')
$$;

-- The raw hashes of a list, one row each. STRICT keeps it from being inlined, so that the planner takes
-- ROWS 16 (a list that extends a base holds up to 16) rather than generate_series's 1000: with 1000, a
-- read's estimated cost passed jit_above_cost and JIT compilation took 8 s of a 15 ms read.
CREATE FUNCTION {schema}.hash_split(b bytea) RETURNS SETOF bytea
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE ROWS 16 AS $$
    SELECT substring(b FROM i FOR 12) FROM generate_series(1, octet_length(b), 12) AS i
$$;

DROP INDEX {schema}.snapshots_linear_child_idx;
ALTER TABLE {schema}.snapshots
    ALTER COLUMN snapshot_id TYPE bytea USING {schema}.id_bytes(snapshot_id),
    ALTER COLUMN parent_id TYPE bytea USING {schema}.id_bytes(parent_id);
CREATE UNIQUE INDEX snapshots_linear_child_idx
    ON {schema}.snapshots (tenant_id, conversation_id, namespace, (coalesce(parent_id, ''::bytea)))
    WHERE NOT forked;
ALTER TABLE {schema}.snapshot_writes
    ALTER COLUMN snapshot_id TYPE bytea USING {schema}.id_bytes(snapshot_id),
    ALTER COLUMN task_id TYPE bytea USING {schema}.id_bytes(task_id);
ALTER TABLE {schema}.snapshot_blobs
    ALTER COLUMN chunks TYPE bytea USING {schema}.hash_bytes(array_to_string(chunks, ''));
ALTER TABLE {schema}.snapshot_chunks
    ALTER COLUMN hash TYPE bytea USING {schema}.hash_bytes(hash);
