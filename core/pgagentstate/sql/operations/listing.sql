-- Conversations with their health, and the tenants (ops/operations/listing.py).
-- "Open" conversations are active, waiting_customer and awaiting_approval; an open conversation
-- without activity for %(idle)s seconds counts as abandoned.

-- name: ops_conversation_list
-- A page of conversations with their health. Filters and ordering run on the conversations alone; the
-- per-conversation step and ledger counts are computed for the page only.
WITH page AS (
    SELECT c.*,
           CASE WHEN c.status IN ('active', 'waiting_customer', 'awaiting_approval')
                     AND c.updated_at < now() - make_interval(secs => %(idle)s)
                THEN 'abandoned' ELSE c.status END AS health
    FROM {schema}.conversations c
    WHERE c.tenant_id = %(tenant)s
      AND (%(app)s::text IS NULL OR c.app = %(app)s)
      AND (%(framework)s::text IS NULL OR c.framework = %(framework)s)
      AND (%(user_id)s::text IS NULL OR c.user_id = %(user_id)s)
      AND (%(status)s::text IS NULL OR c.status = %(status)s)
      AND (%(idle_over)s::float8 IS NULL OR c.updated_at < now() - make_interval(secs => %(idle_over)s))
      AND (%(active_within)s::float8 IS NULL OR c.updated_at >= now() - make_interval(secs => %(active_within)s))
      AND (%(id_prefix)s::text IS NULL OR starts_with(c.id, %(id_prefix)s))
      AND (%(health)s::text IS NULL OR %(health)s = CASE
               WHEN c.status IN ('active', 'waiting_customer', 'awaiting_approval')
                    AND c.updated_at < now() - make_interval(secs => %(idle)s)
               THEN 'abandoned' ELSE c.status END)
      AND (NOT %(stuck_only)s OR EXISTS (
               SELECT 1 FROM {schema}.workflow_steps s
               WHERE s.tenant_id = c.tenant_id AND s.conversation_id = c.id
                 AND s.status = 'in_progress' AND s.lease_expires_at < now()))
    ORDER BY c.updated_at DESC, c.id
    LIMIT %(limit)s OFFSET %(offset)s
)
SELECT p.tenant_id, p.id, p.app, p.framework, p.user_id, p.channel, p.status, p.metadata::text,
       p.version, p.last_seq, p.created_at, p.updated_at,
       p.health, st.stuck, st.failed, lg.calls, lg.duplicate_hits, cp.messages
FROM page p
CROSS JOIN LATERAL (
    SELECT count(*) FILTER (WHERE s.status = 'in_progress' AND s.lease_expires_at < now()) AS stuck,
           count(*) FILTER (WHERE s.status = 'failed') AS failed
    FROM {schema}.workflow_steps s
    WHERE s.tenant_id = p.tenant_id AND s.conversation_id = p.id
) st
CROSS JOIN LATERAL (
    SELECT count(*) AS calls, coalesce(sum(k.duplicate_hits), 0)::bigint AS duplicate_hits
    FROM {schema}.idempotency_keys k
    WHERE k.tenant_id = p.tenant_id AND k.conversation_id = p.id
) lg
LEFT JOIN LATERAL (
    -- A checkpointed thread (LangGraph) has no events: its messages are the elements of the 'messages'
    -- channel (LangGraph's MessagesState) in its newest root checkpoint, stored one chunk per message, a
    -- base version's chunks first. Three primary-key probes; NULL without checkpoints.
    SELECT (octet_length(b.chunks) + coalesce(octet_length(base.chunks), 0)) / 12 AS messages  -- 12-byte hashes
    FROM (SELECT s.channel_versions->>'messages' AS version
          FROM {schema}.snapshots s
          WHERE s.tenant_id = p.tenant_id AND s.conversation_id = p.id AND s.namespace = ''
          ORDER BY s.snapshot_id DESC
          LIMIT 1) head
    JOIN {schema}.snapshot_blobs b
      ON b.tenant_id = p.tenant_id AND b.conversation_id = p.id AND b.namespace = ''
     AND b.channel = 'messages' AND b.version = head.version
    LEFT JOIN {schema}.snapshot_blobs base
      ON base.tenant_id = p.tenant_id AND base.conversation_id = p.id AND base.namespace = ''
     AND base.channel = 'messages' AND base.version = b.base
) cp ON true
ORDER BY p.updated_at DESC, p.id

-- name: ops_tenants
-- Distinct tenants by a skip scan of the conversations primary key (one index probe per tenant).
WITH RECURSIVE t(tenant_id) AS (
    (SELECT c.tenant_id FROM {schema}.conversations c ORDER BY c.tenant_id LIMIT 1)
    UNION ALL
    SELECT (SELECT c.tenant_id FROM {schema}.conversations c WHERE c.tenant_id > t.tenant_id
            ORDER BY c.tenant_id LIMIT 1)
    FROM t WHERE t.tenant_id IS NOT NULL
)
SELECT t.tenant_id FROM t WHERE t.tenant_id IS NOT NULL
