package auth

import (
	"context"

	"github.com/google/uuid"
)

// The console (a browser signed in with a key) calls the API's own routes
// in-process. Its requests carry the session's key id in their context
// instead of the key in an Authorization header: the console keeps only the
// id, never the token. Only code in this process can put a value in a
// request's context, so no client can claim a key this way.

type sessionKeyCtx struct{}

type probeCtx struct{}

// WithSessionKey returns ctx marking a request as made with the key whose id
// is id; Middleware authenticates it as it would the key's token.
func WithSessionKey(ctx context.Context, id uuid.UUID) context.Context {
	return context.WithValue(ctx, sessionKeyCtx{}, id)
}

func sessionKeyID(ctx context.Context) (uuid.UUID, bool) {
	id, ok := ctx.Value(sessionKeyCtx{}).(uuid.UUID)
	return id, ok
}

// WithProbe returns ctx marking a request as a question: it is authenticated
// and authorized as usual, and then answered 204 without running its
// handler. The console shows a form only when the API would take it, and
// asks the route's own rule rather than keep a copy of it.
func WithProbe(ctx context.Context) context.Context {
	return context.WithValue(ctx, probeCtx{}, true)
}

func probing(ctx context.Context) bool {
	p, _ := ctx.Value(probeCtx{}).(bool)
	return p
}
