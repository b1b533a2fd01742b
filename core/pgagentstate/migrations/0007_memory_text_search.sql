-- Memory search terms come from the core (pgagentstate.textsearch): NFKC-normalised, case-folded, with a
-- term per character of scripts written without spaces, the same on every server. The 'simple' parser
-- lowercased ASCII only (in the C locale), compared code points (a decomposed "Café" never met a
-- composed one) and kept "私の名前は太郎です" as one word. Rows stored before this migration keep the
-- terms the parser gave them until they are written again.
ALTER TABLE {schema}.memories ALTER COLUMN search DROP EXPRESSION;

-- The order items were first stored in: equal-rank search hits come back in it (as ADK's in-memory
-- service returns them); created_at cannot tell apart the items of one batch.
ALTER TABLE {schema}.memories ADD COLUMN seq bigint GENERATED ALWAYS AS IDENTITY;
