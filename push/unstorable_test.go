package push_test

import (
	"net/http"
	"testing"

	"github.com/roomhub/messaging-api/app/apptest"
)

// TestDeadLettersUnstorableInput: a replay naming an id PostgreSQL cannot
// hold (a NUL character) gets a 422 naming it, alike on both databases, not
// a 500.
func TestDeadLettersUnstorableInput(t *testing.T) {
	t.Parallel()
	apptest.ForEachDialect(t, func(t *testing.T, a *apptest.API) {
		a.Seed(t)
		r := a.Do("POST", "/v1/rooms/orders/subscriptions", `{"type":"PULL","eventTypes":[{"eventType":"order.created"}]}`)
		apptest.Want(t, r, http.StatusCreated)
		sub := "/v1/rooms/orders/subscriptions/" + r.JSON(t)["id"].(string)
		apptest.WantField(t, a.Do("POST", sub+"/dead-letters:replay", `{"ids":["\u0000"]}`), "ids[0]")
	})
}
