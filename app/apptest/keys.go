package apptest

import (
	"context"
	"net/http"
	"testing"

	"github.com/roomhub/messaging-api/api"
	"github.com/roomhub/messaging-api/app"
	"github.com/roomhub/messaging-api/auth"
	"github.com/roomhub/messaging-api/rooms"
	"github.com/roomhub/messaging-api/store"
	"github.com/roomhub/messaging-api/store/storetest"
)

// NewWithKeys is an API over a fresh database of dialect d with
// authentication on, and the token of an admin key to make the others with
// (Key).
func NewWithKeys(t *testing.T, d store.Dialect) (*API, string) {
	t.Helper()
	cfg := Config()
	cfg.Auth.Disabled = false
	a := Serve(t, storetest.Open(t, d), &Queues{}, IdleRelay{}, cfg)
	keys := app.NewKeyService(a.DB, rooms.NewService(rooms.Deps{Store: a.DB.Rooms(), Cleanup: app.NoCleanup{}, Now: app.Clock}))
	_, token, err := keys.Create(context.Background(), auth.Spec{Name: "test admin", Role: api.RoleAdmin})
	if err != nil {
		t.Fatal(err)
	}
	return a, token
}

// As sends a request with the API key token (Do's checks included).
func (a *API) As(token, method, path string, body any) Response {
	a.T.Helper()
	return a.DoHeaders(method, path, body, map[string]string{"Authorization": "Bearer " + token})
}

// Key makes an API key with admin (a token) from spec, the body of
// POST /v1/api-keys, and returns its token.
func (a *API) Key(t testing.TB, admin string, spec map[string]any) string {
	t.Helper()
	r := a.As(admin, "POST", "/v1/api-keys", spec)
	Want(t, r, http.StatusCreated)
	return r.JSON(t)["key"].(string)
}
