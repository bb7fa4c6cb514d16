-- Approval of subscriptions by the room's manager, and attribute filters.
-- A room with subscription_approval MANUAL starts the subscriptions of keys
-- that do not manage it PENDING; the decision (who, when, why a rejection)
-- stays on the subscription. attribute_filter is the subscription's filter
-- in its canonical JSON (NULL: none); the service compiles it when it loads
-- the subscription.
ALTER TABLE rooms ADD COLUMN subscription_approval TEXT NOT NULL DEFAULT 'AUTOMATIC';

ALTER TABLE subscriptions ADD COLUMN attribute_filter {{json}};
ALTER TABLE subscriptions ADD COLUMN decided_by TEXT NOT NULL DEFAULT '';
ALTER TABLE subscriptions ADD COLUMN decided_at {{timestamp}};
ALTER TABLE subscriptions ADD COLUMN rejection_reason TEXT NOT NULL DEFAULT '';
