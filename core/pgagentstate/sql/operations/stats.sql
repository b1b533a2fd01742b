-- Statistics (ops/operations/stats.py): the tenant's rows and what the store has had to retry, plus
-- cheap catalog counters.

-- name: ops_stats_tenant
SELECT
    (SELECT count(*) FROM {schema}.conversations c WHERE c.tenant_id = %(tenant)s),
    (SELECT coalesce(sum(c.last_seq), 0)::bigint FROM {schema}.conversations c WHERE c.tenant_id = %(tenant)s),
    (SELECT count(*) FROM {schema}.state_changes h WHERE h.tenant_id = %(tenant)s),
    (SELECT count(*) FROM {schema}.workflow_steps s WHERE s.tenant_id = %(tenant)s),
    (SELECT coalesce(sum(s.attempts - 1) FILTER (WHERE s.attempts > 1), 0)::bigint
     FROM {schema}.workflow_steps s WHERE s.tenant_id = %(tenant)s),
    (SELECT count(*) FROM {schema}.idempotency_keys k WHERE k.tenant_id = %(tenant)s),
    (SELECT coalesce(sum(k.attempts - 1) FILTER (WHERE k.attempts > 1), 0)::bigint
     FROM {schema}.idempotency_keys k WHERE k.tenant_id = %(tenant)s),
    (SELECT coalesce(sum(k.duplicate_hits), 0)::bigint FROM {schema}.idempotency_keys k
     WHERE k.tenant_id = %(tenant)s AND k.duplicate_hits > 0),
    (SELECT count(*) FROM {schema}.memories m WHERE m.tenant_id = %(tenant)s),
    (SELECT count(*) FROM {schema}.snapshots s WHERE s.tenant_id = %(tenant)s),
    (SELECT count(*) FROM {schema}.archived_conversations a WHERE a.tenant_id = %(tenant)s)

-- name: ops_stats_tables
-- Per table of the schema (all tenants): estimated rows (-1: not analyzed yet, no estimate), size with indexes and TOAST, and the server's
-- cumulative counters since its statistics were last reset.
SELECT c.relname, c.reltuples::bigint, pg_total_relation_size(c.oid),
       coalesce(s.n_live_tup, 0), coalesce(s.n_dead_tup, 0),
       coalesce(s.n_tup_ins, 0), coalesce(s.n_tup_upd, 0), coalesce(s.n_tup_hot_upd, 0), coalesce(s.n_tup_del, 0),
       coalesce(s.seq_scan, 0), coalesce(s.idx_scan, 0), greatest(s.last_autovacuum, s.last_vacuum)
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
WHERE n.nspname = %(schema_name)s AND c.relkind IN ('r', 'p')
ORDER BY pg_total_relation_size(c.oid) DESC, c.relname

-- name: ops_stats_database
-- Database-wide transaction counters: a rising rollback share means conflicts (failed compare-and-swap,
-- lock timeouts) or errors; deadlocks should stay at 0.
SELECT d.xact_commit, d.xact_rollback, d.deadlocks, d.conflicts, d.stats_reset
FROM pg_stat_database d WHERE d.datname = current_database()
