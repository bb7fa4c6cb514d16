-- API keys (stored as SHA-256 hashes of high-entropy tokens, never in clear)
-- and the owner of a subscription (the subject of the subscriber key that
-- created it).

CREATE TABLE api_keys (
    id                 {{uuid}} PRIMARY KEY,
    name               TEXT NOT NULL,
    role               TEXT NOT NULL,
    subject            TEXT NOT NULL DEFAULT '',
    rooms              TEXT NOT NULL DEFAULT '[]',
    publish_rate_limit DOUBLE PRECISION,
    publish_burst      INTEGER,
    prefix             TEXT NOT NULL,
    key_hash           TEXT NOT NULL UNIQUE,
    created_at         {{timestamp}} NOT NULL,
    expires_at         {{timestamp}},
    revoked_at         {{timestamp}}
);

ALTER TABLE subscriptions ADD COLUMN owner TEXT NOT NULL DEFAULT '';
CREATE INDEX subscriptions_owner ON subscriptions (room_id, owner);
