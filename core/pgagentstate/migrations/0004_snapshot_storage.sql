-- Snapshot storage that grows linearly with a conversation, not quadratically.

-- A blob may extend another version of its channel: `base` names that version (same conversation and
-- namespace), and `chunks` holds only the chunks appended to the base's list. A message list that grew by
-- two messages then costs two hashes, not the whole list of hashes again. NULL: `chunks` is the full list.
-- Reads follow the bases (callers keep the chains short); garbage collection keeps every base that a
-- remaining blob is built on.
ALTER TABLE {schema}.snapshot_blobs ADD COLUMN base text;
