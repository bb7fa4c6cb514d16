-- Published events and the published-messages log, which is also the outbox:
-- a row with sent_at NULL and status 'pending' is a send the relay still owes.

CREATE TABLE events (
    id               {{uuid}} PRIMARY KEY,
    room_id          {{uuid}} NOT NULL,
    request_id       {{uuid}} NOT NULL,
    correlation_id   TEXT NOT NULL,
    event_type_id    {{uuid}} NOT NULL,
    event_type       TEXT NOT NULL,
    version          INTEGER NOT NULL,
    payload          TEXT NOT NULL,
    attributes       TEXT NOT NULL DEFAULT '{}',
    idempotency_key  TEXT,
    request_hash     TEXT NOT NULL DEFAULT '',
    destinations     INTEGER NOT NULL,
    published_at     {{timestamp}} NOT NULL,
    expires_at       {{timestamp}},
    UNIQUE (room_id, idempotency_key)
);
CREATE INDEX events_room_correlation ON events (room_id, correlation_id);
CREATE INDEX events_published_at ON events (published_at);
CREATE INDEX events_request ON events (request_id);

CREATE TABLE published_messages (
    id                {{uuid}} PRIMARY KEY,
    event_id          {{uuid}} NOT NULL REFERENCES events (id),
    room_id           {{uuid}} NOT NULL,
    correlation_id    TEXT NOT NULL,
    subscription_id   {{uuid}} NOT NULL,
    subscription_type TEXT NOT NULL,
    destination       TEXT NOT NULL,
    attempt           INTEGER NOT NULL,
    scheduled_delay   BIGINT NOT NULL DEFAULT 0,
    created_at        {{timestamp}} NOT NULL,
    sent_at           {{timestamp}},
    claimed_by        TEXT NOT NULL DEFAULT '',
    claimed_until     {{timestamp}},
    status            TEXT NOT NULL,
    status_code       INTEGER,
    error             TEXT NOT NULL DEFAULT '',
    completed_at      {{timestamp}}
);
CREATE INDEX published_messages_event ON published_messages (event_id, id);
CREATE INDEX published_messages_subscription ON published_messages (subscription_id, id);
CREATE INDEX published_messages_pending ON published_messages (id) WHERE sent_at IS NULL;
