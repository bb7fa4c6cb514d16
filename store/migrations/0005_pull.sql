-- Pull subscriptions: the ack deadline, and leases of pulled messages. A
-- pulled message lives here (not in the broker) until it is acked, nacked or
-- its deadline passes, so every API process sees every lease.

ALTER TABLE subscriptions ADD COLUMN ack_deadline BIGINT NOT NULL DEFAULT 30000;

CREATE TABLE pull_leases (
    ack_id          {{uuid}} PRIMARY KEY,
    subscription_id {{uuid}} NOT NULL,
    room_id         {{uuid}} NOT NULL,
    send_id         {{uuid}},
    event_id        {{uuid}} NOT NULL,
    correlation_id  TEXT NOT NULL,
    event_type      TEXT NOT NULL,
    version         INTEGER NOT NULL,
    payload         TEXT NOT NULL,
    attributes      TEXT NOT NULL DEFAULT '{}',
    attempt         INTEGER NOT NULL,
    published_at    {{timestamp}} NOT NULL,
    expires_at      {{timestamp}},
    deadline        {{timestamp}} NOT NULL,
    leased_at       {{timestamp}} NOT NULL
);
CREATE INDEX pull_leases_deadline ON pull_leases (deadline);
CREATE INDEX pull_leases_subscription ON pull_leases (subscription_id);
