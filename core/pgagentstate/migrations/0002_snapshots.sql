-- Snapshot chains without silent forks, and deleted threads that stay deleted.

-- A snapshot either continues its chain (forked = false) or starts a branch on purpose (a LangGraph time
-- travel, update_state on an old checkpoint, a parentless checkpoint of a test harness). At most one
-- snapshot continues from any parent — and at most one chain starts from nothing — per namespace, so two
-- writers that loaded the same head cannot both commit a child of it: the second insert fails on this
-- index and the store reports VersionConflict instead of forking the thread silently.
ALTER TABLE {schema}.snapshots ADD COLUMN forked boolean NOT NULL DEFAULT false;
CREATE UNIQUE INDEX snapshots_linear_child_idx
    ON {schema}.snapshots (tenant_id, conversation_id, namespace, (coalesce(parent_id, '')))
    WHERE NOT forked;

-- Threads deleted through the snapshot API. A late write of a run that was still in flight (pending
-- writes of a task) must not bring the thread back; only a new chain (a parentless snapshot) or a copy
-- clears the mark.
CREATE TABLE {schema}.snapshot_tombstones (
    tenant_id       text        NOT NULL,
    conversation_id text        NOT NULL,
    deleted_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, conversation_id)
);
ALTER TABLE {schema}.snapshot_tombstones ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON {schema}.snapshot_tombstones
    USING (tenant_id = current_setting('pgagentstate.tenant', true));
