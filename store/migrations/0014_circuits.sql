-- Circuit breakers and delivery rate limits of PUSH subscriptions.

-- The breaker's settings as given: a room's defaults, a subscription's
-- overrides of them (JSON; NULL: the defaults, or the room's).
ALTER TABLE rooms ADD COLUMN circuit_breaker TEXT;
ALTER TABLE subscriptions ADD COLUMN circuit_breaker TEXT;
-- Requests per second to the push URL, over every dispatcher (NULL: no limit).
ALTER TABLE subscriptions ADD COLUMN max_delivery_rate DOUBLE PRECISION;

-- The circuit, which every dispatcher process shares. It is read with the
-- subscription, so a dispatcher learns of a change with its cached copy of
-- the subscription at no extra cost, and it is written only when it changes
-- state, by an UPDATE that checks circuit_version.
ALTER TABLE subscriptions ADD COLUMN circuit_state TEXT NOT NULL DEFAULT 'closed';
ALTER TABLE subscriptions ADD COLUMN circuit_version BIGINT NOT NULL DEFAULT 0;
ALTER TABLE subscriptions ADD COLUMN circuit_opened_at {{timestamp}};
ALTER TABLE subscriptions ADD COLUMN circuit_cooldown_ms BIGINT NOT NULL DEFAULT 0;
ALTER TABLE subscriptions ADD COLUMN circuit_probe_at {{timestamp}};
ALTER TABLE subscriptions ADD COLUMN circuit_last_error TEXT NOT NULL DEFAULT '';
ALTER TABLE subscriptions ADD COLUMN circuit_last_status_code INTEGER;
-- For the gauge of circuits that are not closed (a few rows at most).
CREATE INDEX subscriptions_circuit_not_closed ON subscriptions (circuit_state) WHERE circuit_state <> 'closed';

-- The pace of each rate-limited subscription, shared by every dispatcher
-- (GCRA): next_slot_us is when its next free request slot begins (epoch
-- microseconds); a dispatcher reserves slots in batches by moving it on.
-- deferred_us spreads the messages that found no slot soon enough, one slot
-- apart; granted is the last reservation's count, for RETURNING.
CREATE TABLE delivery_rates (
    subscription_id {{uuid}} PRIMARY KEY REFERENCES subscriptions (id) ON DELETE CASCADE,
    next_slot_us    BIGINT NOT NULL,
    granted         INTEGER NOT NULL DEFAULT 0,
    deferred_us     BIGINT NOT NULL DEFAULT 0
);
