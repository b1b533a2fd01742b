-- Migration bookkeeping; all of it runs in one transaction under a transaction-level advisory lock, so
-- several processes calling setup() at once end with one schema and no error.

-- name: migrate_lock
SELECT pg_advisory_xact_lock(hashtextextended('pgagentstate.migrate:' || %(schema_name)s, 0))

-- name: migrate_create_schema
CREATE SCHEMA IF NOT EXISTS {schema}

-- name: migrate_create_table
CREATE TABLE IF NOT EXISTS {schema}.migrations (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)

-- name: migrate_applied
SELECT version FROM {schema}.migrations ORDER BY version

-- name: migrate_record
INSERT INTO {schema}.migrations (version, name) VALUES (%(version)s, %(name)s)

-- name: migrate_table_exists
SELECT to_regclass(quote_ident(%(schema_name)s) || '.migrations') IS NOT NULL
