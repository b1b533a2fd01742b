-- What the operators' timeline needs to tell what happened in which order, and what was retried.
-- events.recorded_at: when the store wrote the event. created_at is the application's (a message's send
-- time, a simulated clock), so ordering by it put a refund before the message that asked for it.
-- NULL for events written before this migration (the timeline then uses created_at); no table rewrite.
ALTER TABLE {schema}.events ADD COLUMN recorded_at timestamptz;
ALTER TABLE {schema}.events ALTER COLUMN recorded_at SET DEFAULT now();
-- retries: one entry per attempt that did not finish before another started (a failure, or a lease that
-- ran out because the worker died: the kill -9 of the demo), the newest 20. NULL until the first retry,
-- so a step or call that succeeds first time writes nothing more than before.
ALTER TABLE {schema}.workflow_steps ADD COLUMN retries jsonb;
ALTER TABLE {schema}.idempotency_keys ADD COLUMN retries jsonb;
