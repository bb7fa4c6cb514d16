-- How often a push copy was held (PAUSED subscription) or deferred (slow
-- subscription) since its last attempt: each time it waits longer. It used to
-- travel only as the x-held header of the broker message; a deferred copy now
-- waits in the outbox (its lease is the delay) and the relay that sends it
-- builds the message from this row.
ALTER TABLE published_messages ADD COLUMN held INTEGER NOT NULL DEFAULT 0;
