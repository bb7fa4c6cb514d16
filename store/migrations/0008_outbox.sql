-- The outbox moves out of the published-messages log into a narrow table: one
-- row per send the relay still owes the broker, inserted with the send and
-- deleted once the broker confirmed it (or it expired). The relay's claims
-- then scan only the pending rows, and vacuuming them takes milliseconds,
-- while published_messages keeps the history off the hot path. (Claims over
-- the log's partial index slowed to 450 ms per round as dead entries piled up,
-- and vacuuming the log to cure that took seconds; see docs/benchmarks.md.)
-- A row whose send was settled or purged meanwhile is dropped by the next
-- claim that meets it.

-- Not a rolling upgrade: stop every process of an older version before this
-- migration runs (docs/operations.md). Writers of the log wait until it is
-- done, so that no pending send escapes the copy below.
{{postgres}}LOCK TABLE published_messages IN SHARE ROW EXCLUSIVE MODE;

CREATE TABLE outbox (
    send_id       {{uuid}} PRIMARY KEY REFERENCES published_messages (id) ON DELETE CASCADE,
    created_at    {{timestamp}} NOT NULL,
    claimed_by    TEXT NOT NULL DEFAULT '',
    claimed_until {{timestamp}}
);

INSERT INTO outbox (send_id, created_at, claimed_by, claimed_until)
    SELECT id, created_at, claimed_by, claimed_until FROM published_messages
    WHERE sent_at IS NULL AND status = 'pending';

DROP INDEX published_messages_pending;
ALTER TABLE published_messages DROP COLUMN claimed_by;
ALTER TABLE published_messages DROP COLUMN claimed_until;

-- PostgreSQL only: vacuum the outbox as soon as 1000 rows are dead (it is
-- small, so that is quick) rather than at 20 % of its size, and leave room in
-- the log's pages so that recording a send's outcome is a HOT update.
{{postgres}}ALTER TABLE outbox SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000, autovacuum_analyze_scale_factor = 0, autovacuum_analyze_threshold = 1000);
{{postgres}}ALTER TABLE published_messages SET (fillfactor = 85);
