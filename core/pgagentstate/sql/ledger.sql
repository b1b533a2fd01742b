-- The idempotency ledger. Columns returned: key, conversation_id, api, request_hash, status, result, error,
-- owner, attempts, duplicate_hits, lease_expires_at, created_at, updated_at, completed_at

-- name: ledger_claim
-- Claims the key for %(owner)s: a new key, a failed attempt, or an in-progress claim whose lease ran out
-- (its worker crashed). Returns no row when someone else holds the key or it already succeeded.
INSERT INTO {schema}.idempotency_keys AS k
    (tenant_id, key, conversation_id, api, request_hash, request, status, owner, lease_expires_at)
VALUES (%(tenant)s, %(key)s, %(conversation_id)s, %(api)s, %(request_hash)s, %(request)s::jsonb, 'in_progress',
        %(owner)s, clock_timestamp() + make_interval(secs => %(lease)s))
ON CONFLICT (tenant_id, key) DO UPDATE
SET owner = EXCLUDED.owner, status = 'in_progress', attempts = k.attempts + 1,
    lease_expires_at = EXCLUDED.lease_expires_at, updated_at = now(),
    -- The attempt taken over, for the operators' timeline (newest 20; only retries pay for this). Not its
    -- error: that may be sealed, and key rotation re-seals k.error only.
    retries = CASE WHEN jsonb_array_length(coalesce(k.retries, '[]')) >= 20 THEN k.retries - 0
                   ELSE coalesce(k.retries, '[]') END
              || jsonb_build_array(jsonb_build_object('at', now(), 'status', k.status, 'owner', k.owner,
                                                      'lease_expires_at', k.lease_expires_at))
WHERE k.request_hash = EXCLUDED.request_hash
  AND (k.status = 'failed' OR (k.status = 'in_progress' AND k.lease_expires_at < clock_timestamp()))
RETURNING k.key, k.conversation_id, k.api, k.request_hash, k.status, k.result::text, k.error, k.owner, k.attempts,
          k.duplicate_hits, k.lease_expires_at, k.created_at, k.updated_at, k.completed_at

-- name: ledger_peek
-- What stopped a claim. A replay of a recorded result counts as a duplicate call stopped by the ledger.
UPDATE {schema}.idempotency_keys k
SET duplicate_hits = k.duplicate_hits + CASE WHEN k.status = 'succeeded' AND k.request_hash = %(request_hash)s
                                            THEN 1 ELSE 0 END
WHERE k.tenant_id = %(tenant)s AND k.key = %(key)s
RETURNING k.key, k.conversation_id, k.api, k.request_hash, k.status, k.result::text, k.error, k.owner, k.attempts,
          k.duplicate_hits, k.lease_expires_at, k.created_at, k.updated_at, k.completed_at

-- name: ledger_succeed
-- Records the outcome unless a success is recorded already: when a lease ran out and two workers both
-- finished, the first recorded result wins (its caller may have acted on it); the later one gets no row.
UPDATE {schema}.idempotency_keys k
SET status = 'succeeded', result = %(result)s::jsonb, error = NULL, owner = %(owner)s, completed_at = now(),
    updated_at = now()
WHERE k.tenant_id = %(tenant)s AND k.key = %(key)s AND k.status <> 'succeeded'
RETURNING k.key, k.conversation_id, k.api, k.request_hash, k.status, k.result::text, k.error, k.owner, k.attempts,
          k.duplicate_hits, k.lease_expires_at, k.created_at, k.updated_at, k.completed_at

-- name: ledger_fail
UPDATE {schema}.idempotency_keys k
SET status = 'failed', error = %(error)s, updated_at = now()
WHERE k.tenant_id = %(tenant)s AND k.key = %(key)s AND k.owner = %(owner)s AND k.status = 'in_progress'

-- name: ledger_get
SELECT k.key, k.conversation_id, k.api, k.request_hash, k.status, k.result::text, k.error, k.owner, k.attempts,
       k.duplicate_hits, k.lease_expires_at, k.created_at, k.updated_at, k.completed_at
FROM {schema}.idempotency_keys k
WHERE k.tenant_id = %(tenant)s AND k.key = %(key)s

-- name: ledger_list
SELECT k.key, k.conversation_id, k.api, k.request_hash, k.status, k.result::text, k.error, k.owner, k.attempts,
       k.duplicate_hits, k.lease_expires_at, k.created_at, k.updated_at, k.completed_at
FROM {schema}.idempotency_keys k
WHERE k.tenant_id = %(tenant)s AND (%(conversation_id)s::text IS NULL OR k.conversation_id = %(conversation_id)s)
ORDER BY k.created_at, k.key
