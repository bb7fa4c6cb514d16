-- The credential a PUSH subscription's endpoint asks of each request
-- (pushAuth: basic, bearer or headers), sealed with AES-256-GCM under
-- PUSH_AUTH_KEY (package seal): push_auth holds the base64 of nonce and
-- ciphertext, push_auth_key the id of the key that sealed it, so that a key
-- can be rotated while older ones still open what they sealed. Both are ''
-- for none.
ALTER TABLE subscriptions ADD COLUMN push_auth TEXT NOT NULL DEFAULT '';
ALTER TABLE subscriptions ADD COLUMN push_auth_key TEXT NOT NULL DEFAULT '';
