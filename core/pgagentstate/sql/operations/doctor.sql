-- The catalog reads of `doctor` (ops/operations/doctor.py): not scoped by tenant.

-- name: ops_doctor_server
SELECT current_setting('server_version'), current_setting('server_version_num')::int, current_database(),
       current_user, r.rolsuper, r.rolbypassrls,
       current_setting('max_connections')::int,
       (SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()),
       current_setting('statement_timeout'), current_setting('idle_in_transaction_session_timeout'),
       current_setting('lock_timeout'), current_setting('default_transaction_isolation'),
       (SELECT l.ssl FROM pg_stat_ssl l WHERE l.pid = pg_backend_pid()), inet_server_port(), clock_timestamp(),
       current_setting('autovacuum'), current_setting('track_counts')
FROM pg_roles r WHERE r.rolname = current_user

-- name: ops_doctor_rls
-- Row-level security per table of the schema, and whether it binds the current role (owners and roles with
-- BYPASSRLS are not bound unless FORCE ROW LEVEL SECURITY is set).
SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity, pg_get_userbyid(c.relowner),
       pg_has_role(current_user, c.relowner, 'MEMBER'),
       (SELECT count(*) FROM pg_policies p WHERE p.schemaname = n.nspname AND p.tablename = c.relname)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = %(schema_name)s AND c.relkind IN ('r', 'p') AND c.relname <> 'migrations'
ORDER BY c.relname

-- name: ops_doctor_encryption
-- A sample of the tenant's event payloads: how many are ciphertexts (JSON strings starting with the
-- envelope marker of pgagentstate.crypto).
SELECT count(*) FILTER (WHERE json_typeof(x.payload) = 'string' AND starts_with(x.payload #>> '{}', %(marker)s)),
       count(*)
FROM (SELECT e.payload FROM {schema}.events e WHERE e.tenant_id = %(tenant)s LIMIT %(limit)s) x
