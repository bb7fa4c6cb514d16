-- Sessions of the web console: a browser signed in with an API key. The
-- browser's cookie holds a random session id; only its SHA-256 hash is kept,
-- so a database dump gives no usable session. key_id is NULL when the service
-- runs without API keys (AUTH_DISABLED). One row per signed-in browser; ended
-- sessions are purged.

CREATE TABLE console_sessions (
    id_hash      TEXT PRIMARY KEY,
    key_id       {{uuid}},
    created_at   {{timestamp}} NOT NULL,
    last_seen_at {{timestamp}} NOT NULL,
    expires_at   {{timestamp}} NOT NULL
);
CREATE INDEX console_sessions_key ON console_sessions (key_id);
