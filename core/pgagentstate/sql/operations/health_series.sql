-- Conversation health over time (ops/operations/health_series.py), scoped by %(tenant)s.
-- Every conversation started in [%(origin)s, %(until)s) falls in the bucket of its start
-- (date_bin(%(every)s seconds, created_at, %(origin)s): UTC hours or days when origin is on one) and is
-- counted once there, under its health as of %(now)s: its status, or 'abandoned' when open (active,
-- waiting_customer, awaiting_approval) and idle for %(idle)s seconds. So a bucket's figures are the
-- outcome so far of the conversations that started in it (a cohort), which only needs created_at, a
-- column that never changes: updated_at is in no index so that appends stay HOT (migration 0006), and
-- the status history is not recorded, only the current status.

-- name: ops_health_series
-- Cost, for n conversations started in the window: a range scan of conversations_created_idx
-- (tenant_id, created_at) over those n rows and their heap tuples (status, updated_at, app, framework),
-- independent of how many conversations the tenant has outside the window; plus the tenant's stuck steps
-- (workflow_steps_status_idx, as `health` reads them) and its ledger rows that stopped a duplicate
-- (the partial idempotency_keys_duplicates_idx), both few, read once and hash-joined (a probe per
-- conversation into each, the first version, cost 2n index lookups: 15 ms for the hour view below).
-- Measured on 200,000 conversations over 60 days (3,300 a day), 2,000 stuck steps and
-- 2,000 ledger rows with duplicates (PG 15, warm cache): 24 hours by hour 8 ms in the server (a
-- sequential scan without the index: 39 ms, growing with the table), 30 days by day (99,000
-- conversations, half the table: the planner may scan it all) 140 ms.
-- Rows are grouped per (bucket, app, framework), per bucket, per (app, framework) over the whole window
-- and over everything (GROUPING SETS: one scan, and each set's percentiles are computed over its own
-- completions, never averaged from smaller sets'); the sets' rows have NULL in the columns they do not
-- group by (the real app and framework are never NULL: NOT NULL DEFAULT ''). Time to completion is
-- updated_at - created_at of a completed conversation (its last activity: an event appended after the
-- status change moves it).
WITH stuck AS (
    SELECT s.conversation_id AS id, count(*) AS steps
    FROM {schema}.workflow_steps s
    WHERE s.tenant_id = %(tenant)s AND s.status = 'in_progress' AND s.lease_expires_at < %(now)s
    GROUP BY s.conversation_id
), replayed AS (
    SELECT k.conversation_id AS id, sum(k.duplicate_hits) AS hits
    FROM {schema}.idempotency_keys k
    WHERE k.tenant_id = %(tenant)s AND k.duplicate_hits > 0 AND k.conversation_id IS NOT NULL
    GROUP BY k.conversation_id
), w AS (
    SELECT date_bin(make_interval(secs => %(every)s), c.created_at, %(origin)s) AS bucket,
           c.app,
           c.framework,
           CASE WHEN c.status IN ('active', 'waiting_customer', 'awaiting_approval')
                     AND c.updated_at < %(now)s - make_interval(secs => %(idle)s)
                THEN 'abandoned' ELSE c.status END AS health,
           CASE WHEN c.status = 'completed' THEN extract(epoch FROM c.updated_at - c.created_at)::float8 END
               AS took,
           coalesce(st.steps, 0) AS stuck_steps,
           coalesce(r.hits, 0) AS duplicates
    FROM {schema}.conversations c
    LEFT JOIN stuck st ON st.id = c.id
    LEFT JOIN replayed r ON r.id = c.id
    WHERE c.tenant_id = %(tenant)s AND c.created_at >= %(origin)s AND c.created_at < %(until)s
      AND (%(app)s::text IS NULL OR c.app = %(app)s)
      AND (%(framework)s::text IS NULL OR c.framework = %(framework)s)
)
SELECT w.bucket,
       GROUPING(w.bucket) = 0 AS per_bucket,
       GROUPING(w.app, w.framework) = 0 AS per_group,
       w.app,
       w.framework,
       count(*),
       count(*) FILTER (WHERE w.health = 'active'),
       count(*) FILTER (WHERE w.health = 'waiting_customer'),
       count(*) FILTER (WHERE w.health = 'awaiting_approval'),
       count(*) FILTER (WHERE w.health = 'completed'),
       count(*) FILTER (WHERE w.health = 'failed'),
       count(*) FILTER (WHERE w.health = 'abandoned'),
       count(*) FILTER (WHERE w.stuck_steps > 0),
       coalesce(sum(w.stuck_steps), 0)::bigint,
       coalesce(sum(w.duplicates), 0)::bigint,
       percentile_cont(ARRAY[0.5, 0.9, 0.99]::float8[]) WITHIN GROUP (ORDER BY w.took)
           FILTER (WHERE w.took IS NOT NULL),
       coalesce(sum(w.took), 0)::float8
FROM w
GROUP BY GROUPING SETS ((w.bucket, w.app, w.framework), (w.bucket), (w.app, w.framework), ())
ORDER BY w.bucket, per_group, w.app, w.framework
