-- How often the broker has refused an outbox row's copy (an ERROR frame
-- answering its SEND: no such queue with auto-create off, not authorised,
-- address full with the FAIL policy, ...). The relay tries a refused copy
-- again after a growing pause (its lease) and gives it up as a dead letter
-- (reason broker_refused) after RelayConfig.MaxRefusals refusals, or at once
-- (reason expired) when its event has expired; see publish.Refusal.
ALTER TABLE outbox ADD COLUMN refusals INTEGER NOT NULL DEFAULT 0;
