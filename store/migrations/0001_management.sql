-- Rooms, event types, versions and subscriptions.
-- Placeholders: {{uuid}} and {{timestamp}} become the dialect's types.

CREATE TABLE rooms (
    id                        {{uuid}} PRIMARY KEY,
    identifier                TEXT NOT NULL UNIQUE,
    manager_identifier        TEXT NOT NULL,
    message_expiration        BIGINT NOT NULL DEFAULT 0,
    delivery_delay            BIGINT NOT NULL,
    delivery_delay_multiplier DOUBLE PRECISION NOT NULL,
    delivery_attempts         INTEGER NOT NULL,
    status                    TEXT NOT NULL,
    created_at                {{timestamp}} NOT NULL,
    updated_at                {{timestamp}} NOT NULL
);

CREATE TABLE event_types (
    id          {{uuid}} PRIMARY KEY,
    room_id     {{uuid}} NOT NULL REFERENCES rooms (id),
    identifier  TEXT NOT NULL,
    description TEXT NOT NULL DEFAULT '',
    created_at  {{timestamp}} NOT NULL,
    UNIQUE (room_id, identifier)
);

CREATE TABLE event_type_versions (
    event_type_id {{uuid}} NOT NULL REFERENCES event_types (id),
    version       INTEGER NOT NULL,
    schema        TEXT NOT NULL,
    created_at    {{timestamp}} NOT NULL,
    PRIMARY KEY (event_type_id, version)
);

CREATE TABLE subscriptions (
    id                        {{uuid}} PRIMARY KEY,
    room_id                   {{uuid}} NOT NULL REFERENCES rooms (id),
    type                      TEXT NOT NULL,
    push_url                  TEXT NOT NULL DEFAULT '',
    delivery_delay            BIGINT,
    delivery_delay_multiplier DOUBLE PRECISION,
    delivery_attempts         INTEGER,
    status                    TEXT NOT NULL,
    created_at                {{timestamp}} NOT NULL,
    updated_at                {{timestamp}} NOT NULL
);
CREATE INDEX subscriptions_room ON subscriptions (room_id, id);

-- One row per (subscription, event type, version); version 0 means every version.
CREATE TABLE subscription_event_types (
    subscription_id {{uuid}} NOT NULL REFERENCES subscriptions (id),
    event_type_id   {{uuid}} NOT NULL REFERENCES event_types (id),
    version         INTEGER NOT NULL,
    PRIMARY KEY (subscription_id, event_type_id, version)
);
CREATE INDEX subscription_event_types_event_type ON subscription_event_types (event_type_id, version);
