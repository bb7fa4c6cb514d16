-- Settings that every process sharing this database must agree on, stored by
-- the first process that starts: the push target rule (PUSH_ALLOWED_CIDRS,
-- PUSH_HTTPS_ONLY), which API processes apply to push URLs and dispatchers
-- to deliveries taken from the one shared push queue. A process whose own
-- setting differs refuses to start; `messaging-api push-rule` replaces the
-- stored value.
CREATE TABLE settings (
    name       TEXT PRIMARY KEY,
    value      TEXT NOT NULL,
    updated_at {{timestamp}} NOT NULL
);
