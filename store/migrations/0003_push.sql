-- Push delivery: signing secrets, attempt outcomes, dead letters.

ALTER TABLE subscriptions ADD COLUMN signing_secret TEXT NOT NULL DEFAULT '';
ALTER TABLE subscriptions ADD COLUMN previous_signing_secret TEXT NOT NULL DEFAULT '';
ALTER TABLE subscriptions ADD COLUMN previous_secret_expires_at {{timestamp}};

ALTER TABLE published_messages ADD COLUMN latency_ms BIGINT;
ALTER TABLE published_messages ADD COLUMN response_body TEXT NOT NULL DEFAULT '';
ALTER TABLE published_messages ADD COLUMN next_attempt_at {{timestamp}};

CREATE TABLE dead_letters (
    id                 {{uuid}} PRIMARY KEY,
    room_id            {{uuid}} NOT NULL,
    subscription_id    {{uuid}} NOT NULL,
    event_id           {{uuid}} NOT NULL,
    correlation_id     TEXT NOT NULL,
    event_type_id      {{uuid}} NOT NULL,
    event_type         TEXT NOT NULL,
    version            INTEGER NOT NULL,
    payload            TEXT NOT NULL,
    attributes         TEXT NOT NULL DEFAULT '{}',
    attempts           INTEGER NOT NULL,
    reason             TEXT NOT NULL,
    last_status_code   INTEGER,
    last_error         TEXT NOT NULL DEFAULT '',
    published_at       {{timestamp}} NOT NULL,
    created_at         {{timestamp}} NOT NULL
);
CREATE INDEX dead_letters_subscription ON dead_letters (subscription_id, id);
