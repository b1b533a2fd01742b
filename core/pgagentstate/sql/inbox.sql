-- The durable inbox (ops/inbox.py). Columns returned for a message, in order:
-- conversation_id, seq, delivery_id, request_hash, message, status, attempts, worker, result, error,
-- accepted_at, started_at, finished_at

-- name: inbox_queue_lock
-- The conversation's queue row, created if missing, and locked until the accept commits: two deliveries of
-- one message (or two messages) accepted at once take their turn here, so the next statement sees the
-- other's row and sequence numbers have no gap. Holds for the length of one insert, never for a turn.
INSERT INTO {schema}.inbox_queues AS q (tenant_id, conversation_id)
VALUES (%(tenant)s, %(conversation_id)s)
ON CONFLICT (tenant_id, conversation_id) DO UPDATE SET last_seq = q.last_seq

-- name: inbox_accept
-- The next sequence number and the message, unless this delivery is stored already (then no row).
WITH queue AS (
    UPDATE {schema}.inbox_queues q
    SET last_seq = q.last_seq + 1,
        ready_at = CASE WHEN q.last_seq = q.done_seq THEN now() ELSE q.ready_at END
    WHERE q.tenant_id = %(tenant)s AND q.conversation_id = %(conversation_id)s
      AND NOT EXISTS (SELECT 1 FROM {schema}.inbox_messages m
                      WHERE m.tenant_id = %(tenant)s AND m.conversation_id = %(conversation_id)s
                        AND m.delivery_id = %(delivery_id)s)
    RETURNING q.last_seq
)
INSERT INTO {schema}.inbox_messages (tenant_id, conversation_id, seq, delivery_id, request_hash, message)
SELECT %(tenant)s, %(conversation_id)s, queue.last_seq, %(delivery_id)s, %(request_hash)s, %(message)s::jsonb
FROM queue
RETURNING seq

-- name: inbox_delivery
SELECT m.conversation_id, m.seq, m.delivery_id, m.request_hash, m.message::text, m.status, m.attempts, m.worker,
       m.result::text, m.error, m.accepted_at, m.started_at, m.finished_at
FROM {schema}.inbox_messages m
WHERE m.tenant_id = %(tenant)s AND m.conversation_id = %(conversation_id)s AND m.delivery_id = %(delivery_id)s

-- name: inbox_claim
-- The conversation whose next message waits longest, among those no live lease holds; SKIP LOCKED lets
-- workers claiming at once take different conversations instead of queueing on one row. A claim of a
-- turn whose worker let its lease run out (died, hung) is a recovery: counted, and the message's
-- attempts tell its handler that the turn started before.
WITH pick AS (
    SELECT q.conversation_id, q.done_seq + 1 AS seq, q.owner AS previous
    FROM {schema}.inbox_queues q
    WHERE q.tenant_id = %(tenant)s AND q.last_seq > q.done_seq
      AND (q.lease_expires_at IS NULL OR q.lease_expires_at < clock_timestamp())
    ORDER BY q.ready_at
    LIMIT 1
    FOR UPDATE SKIP LOCKED
), queue AS (
    UPDATE {schema}.inbox_queues q
    SET owner = %(owner)s, lease_expires_at = clock_timestamp() + make_interval(secs => %(lease)s),
        recoveries = q.recoveries + CASE WHEN pick.previous IS NULL THEN 0 ELSE 1 END
    FROM pick
    WHERE q.tenant_id = %(tenant)s AND q.conversation_id = pick.conversation_id
    RETURNING q.conversation_id
)
UPDATE {schema}.inbox_messages m
SET status = 'running', attempts = m.attempts + 1, worker = %(owner)s, started_at = coalesce(m.started_at, now())
FROM pick, queue
WHERE m.tenant_id = %(tenant)s AND m.conversation_id = queue.conversation_id AND m.seq = pick.seq
RETURNING m.conversation_id, m.seq, m.delivery_id, m.request_hash, m.message::text, m.status, m.attempts, m.worker,
          m.result::text, m.error, m.accepted_at, m.started_at, m.finished_at

-- name: inbox_renew
-- Extends the lease of the turn ``owner`` runs; no row when another worker took the turn over.
UPDATE {schema}.inbox_queues q
SET lease_expires_at = clock_timestamp() + make_interval(secs => %(lease)s)
WHERE q.tenant_id = %(tenant)s AND q.conversation_id = %(conversation_id)s AND q.owner = %(owner)s
  AND q.done_seq = %(seq)s - 1
RETURNING q.lease_expires_at

-- name: inbox_hold
-- Locks the queue row of the turn ``owner`` runs (no row: the turn was taken over), before inbox_finish:
-- that statement then starts after any accept that held the row, and sees its message as the next one.
SELECT q.done_seq
FROM {schema}.inbox_queues q
WHERE q.tenant_id = %(tenant)s AND q.conversation_id = %(conversation_id)s AND q.owner = %(owner)s
  AND q.done_seq = %(seq)s - 1
FOR UPDATE

-- name: inbox_finish
-- Records the outcome (done or failed) and moves the conversation on to its next message.
WITH queue AS (
    UPDATE {schema}.inbox_queues q
    SET done_seq = %(seq)s, owner = NULL, lease_expires_at = NULL,
        ready_at = (SELECT n.accepted_at FROM {schema}.inbox_messages n
                    WHERE n.tenant_id = q.tenant_id AND n.conversation_id = q.conversation_id AND n.seq = %(seq)s + 1)
    WHERE q.tenant_id = %(tenant)s AND q.conversation_id = %(conversation_id)s AND q.owner = %(owner)s
      AND q.done_seq = %(seq)s - 1
    RETURNING q.conversation_id
)
UPDATE {schema}.inbox_messages m
SET status = %(status)s, result = %(result)s::jsonb, error = %(error)s, finished_at = now()
FROM queue
WHERE m.tenant_id = %(tenant)s AND m.conversation_id = queue.conversation_id AND m.seq = %(seq)s
RETURNING m.seq

-- name: inbox_release
-- Gives the turn back after a failed attempt: the same message is claimable again after %(delay)s seconds
-- (not a recovery: nobody died).
WITH queue AS (
    UPDATE {schema}.inbox_queues q
    SET owner = NULL, lease_expires_at = clock_timestamp() + make_interval(secs => %(delay)s)
    WHERE q.tenant_id = %(tenant)s AND q.conversation_id = %(conversation_id)s AND q.owner = %(owner)s
      AND q.done_seq = %(seq)s - 1
    RETURNING q.conversation_id
)
UPDATE {schema}.inbox_messages m
SET status = 'waiting', error = %(error)s
FROM queue
WHERE m.tenant_id = %(tenant)s AND m.conversation_id = queue.conversation_id AND m.seq = %(seq)s
RETURNING m.seq

-- name: inbox_list
SELECT m.conversation_id, m.seq, m.delivery_id, m.request_hash, m.message::text, m.status, m.attempts, m.worker,
       m.result::text, m.error, m.accepted_at, m.started_at, m.finished_at
FROM {schema}.inbox_messages m
WHERE m.tenant_id = %(tenant)s AND m.conversation_id = %(conversation_id)s
ORDER BY m.seq

-- name: inbox_metrics_messages
-- Messages waiting, running and failed, and the age in seconds of the oldest one not answered yet (waiting
-- or running); inbox_messages_open_idx holds exactly the rows read.
SELECT count(*) FILTER (WHERE m.status = 'waiting'),
       count(*) FILTER (WHERE m.status = 'running'),
       count(*) FILTER (WHERE m.status = 'failed'),
       extract(epoch FROM clock_timestamp() - min(m.accepted_at) FILTER (WHERE m.status IN ('waiting', 'running')))::float8
FROM {schema}.inbox_messages m
WHERE m.tenant_id = %(tenant)s AND m.status <> 'done'

-- name: inbox_metrics_queues
-- Conversations with work waiting, those whose worker let its lease run out (not taken over yet), and
-- the turns recovered so far (the recoveries index and the ready index serve the two halves).
SELECT (SELECT count(*) FROM {schema}.inbox_queues q
        WHERE q.tenant_id = %(tenant)s AND q.last_seq > q.done_seq),
       (SELECT count(*) FROM {schema}.inbox_queues q
        WHERE q.tenant_id = %(tenant)s AND q.last_seq > q.done_seq AND q.owner IS NOT NULL
          AND q.lease_expires_at < clock_timestamp()),
       (SELECT coalesce(sum(q.recoveries), 0)::bigint FROM {schema}.inbox_queues q
        WHERE q.tenant_id = %(tenant)s AND q.recoveries > 0)
