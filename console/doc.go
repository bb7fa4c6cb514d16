// Package console is the web console: server-rendered pages, at /console/,
// to manage rooms, event types and subscriptions, follow a message through
// its attempts, replay dead letters, manage API keys and publish a test
// event, in a browser.
//
// # One implementation of every rule
//
// The console has no access to the features' services. Every read and every
// change is a request to the API's own /v1 routes, dispatched in-process
// through the same echo router and middleware as a client's: the request
// carries the session's key id in its context (auth.WithSessionKey), the key
// middleware authenticates it as it would the key's token, the route's
// auth.Handle rule authorizes it, the handler validates it, and the answer is
// decoded into the feature's exported response type. A refusal is the API's
// problem document, whose field errors the page shows beside its fields. The
// console decides what to show with probes (auth.WithProbe): a form appears
// only when the route's own rule admits the key. So the console shows and
// allows exactly what the key may do through the API, and a rule changed in
// a feature changes the console with it.
//
// The one thing no API route serves is the dashboard's service-wide figures
// (publish rate, outcomes, outbox backlog, dead letters, slowest
// subscriptions): they come from the process's metrics and a few bounded
// store queries, and only admin keys (which may do anything) see them.
//
// # Sessions
//
// Signing in checks the API key by asking the API who it is
// (GET /v1/api-keys/current with the key as a bearer token). The browser then
// holds a random 256-bit session id in an HttpOnly, SameSite=Strict cookie
// (Secure when the request came over TLS or X-Forwarded-Proto says https);
// the database keeps only its SHA-256 hash with the key's id, so sessions
// work across API processes behind a load balancer and a database dump holds
// no usable session. A session ends when the browser signs out, when it has
// been idle for IdleTimeout or open for MaxLifetime, and when its key is
// revoked or expires (the next request's authentication fails). Run purges
// ended sessions.
//
// # CSRF, CSP
//
// Every POST must carry the session's CSRF token (derived from the session
// id, so every process can check it without storing it) and pass the
// Origin / Sec-Fetch-Site check of net/http's CrossOriginProtection; the
// sign-in form, before any session, uses a double-submit cookie. Pages are
// served with a strict Content-Security-Policy (no inline script or style),
// so the templates carry no script or style of their own: the console's
// little JavaScript and CSS are files under /console/static/, and charts are
// SVG drawn on the server.
package console
