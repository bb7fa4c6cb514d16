-- W3C trace context of each event (traceparent, tracestate), stored with it
-- so that every copy the outbox relay sends, retries included, carries it.

ALTER TABLE events ADD COLUMN traceparent TEXT NOT NULL DEFAULT '';
ALTER TABLE events ADD COLUMN tracestate TEXT NOT NULL DEFAULT '';

-- A dead letter keeps it too: a replay stays in the publish's trace.
ALTER TABLE dead_letters ADD COLUMN traceparent TEXT NOT NULL DEFAULT '';
ALTER TABLE dead_letters ADD COLUMN tracestate TEXT NOT NULL DEFAULT '';
