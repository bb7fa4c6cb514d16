-- Retry policies: the four-phase policy (JSON), a cap and jitter for the
-- exponential backoff retry, on rooms and as subscription overrides.

ALTER TABLE rooms ADD COLUMN max_delivery_delay BIGINT NOT NULL DEFAULT 0;
ALTER TABLE rooms ADD COLUMN delivery_jitter DOUBLE PRECISION NOT NULL DEFAULT 0;
ALTER TABLE rooms ADD COLUMN retry_policy TEXT;

ALTER TABLE subscriptions ADD COLUMN max_delivery_delay BIGINT;
ALTER TABLE subscriptions ADD COLUMN delivery_jitter DOUBLE PRECISION;
ALTER TABLE subscriptions ADD COLUMN retry_policy TEXT;
