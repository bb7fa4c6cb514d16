package subscriptions_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/roomhub/messaging-api/app/apptest"
	"github.com/roomhub/messaging-api/rooms"
	"github.com/roomhub/messaging-api/subscriptions"
)

// TestCircuitShownAndReset: a room shows its breaker with the defaults
// filled in, a PUSH subscription its overrides, its rate and its circuit,
// which a reset, a resume or a new push URL close; an update of anything
// else leaves it open.
func TestCircuitShownAndReset(t *testing.T) {
	t.Parallel()
	apptest.ForEachDialect(t, func(t *testing.T, a *apptest.API) {
		ctx := context.Background()
		a.Seed(t)
		r := a.Do("PATCH", "/v1/rooms/orders", map[string]any{"circuitBreaker": map[string]any{"cooldown": 5000}})
		apptest.Want(t, r, http.StatusOK)
		want := rooms.DefaultBreaker
		want.Cooldown = 5000
		if got := apptest.Decode[rooms.RoomResponse](t, r).CircuitBreaker; got != want {
			t.Errorf("room's breaker %+v, want %+v", got, want)
		}

		r = a.Do("POST", "/v1/rooms/orders/subscriptions", map[string]any{
			"type": "PUSH", "pushUrl": "https://example.com/hook", "eventTypes": []any{map[string]any{"eventType": "order.created"}},
			"circuitBreaker": map[string]any{"failureRate": 0.5}, "maxDeliveryRate": 2.5,
		})
		apptest.Want(t, r, http.StatusCreated)
		sub := apptest.Decode[subscriptions.Response](t, r)
		path := "/v1/rooms/orders/subscriptions/" + sub.ID
		if sub.CircuitBreaker == nil || sub.CircuitBreaker.FailureRate == nil || *sub.CircuitBreaker.FailureRate != 0.5 ||
			sub.CircuitBreaker.Cooldown != nil || sub.MaxDeliveryRate == nil || *sub.MaxDeliveryRate != 2.5 {
			t.Errorf("created: %s", r.Body)
		}
		if c := sub.Circuit; c == nil || c.State != subscriptions.CircuitClosed || c.OpenedAt != nil || c.Cooldown != nil {
			t.Errorf("a new subscription's circuit: %s", r.Body)
		}

		open := func() {
			t.Helper()
			read, err := a.DB.Push().Circuit(ctx, uuidOf(t, sub.ID))
			if err != nil {
				t.Fatal(err)
			}
			at := time.Now().UTC().Truncate(time.Millisecond)
			read.State, read.Version, read.OpenedAt, read.Cooldown = subscriptions.CircuitOpen, read.Version+1, at, 10*time.Second
			read.ProbeAt, read.LastError, read.LastStatusCode = at.Add(10*time.Second), "HTTP 503", 503
			if won, err := a.DB.Push().SwapCircuit(ctx, uuidOf(t, sub.ID), read); err != nil || !won {
				t.Fatalf("open the circuit: %v, %v", won, err)
			}
		}
		state := func(r apptest.Response) subscriptions.CircuitState {
			t.Helper()
			apptest.Want(t, r, http.StatusOK)
			return apptest.Decode[subscriptions.Response](t, r).Circuit.State
		}

		open()
		r = a.Do("GET", path, nil)
		apptest.Want(t, r, http.StatusOK)
		c := apptest.Decode[subscriptions.Response](t, r).Circuit
		if c.State != subscriptions.CircuitOpen || c.OpenedAt == nil || c.LastError == nil || *c.LastError != "HTTP 503" ||
			c.LastStatusCode == nil || *c.LastStatusCode != 503 || c.Cooldown == nil || *c.Cooldown != 10000 || c.NextProbeAt == nil {
			t.Errorf("open circuit shown as %s", r.Body)
		}
		if s := state(a.Do("PATCH", path, map[string]any{"deliveryAttempts": 7})); s != subscriptions.CircuitOpen {
			t.Errorf("after an update of its attempts: %s, want open", s)
		}
		if s := state(a.Do("POST", path+"/circuit:reset", nil)); s != subscriptions.CircuitClosed {
			t.Errorf("after a reset: %s, want closed", s)
		}
		if s := state(a.Do("GET", path, nil)); s != subscriptions.CircuitClosed {
			t.Errorf("read after a reset: %s, want closed", s)
		}

		open()
		state(a.Do("PATCH", path, map[string]any{"status": "PAUSED"}))
		if s := state(a.Do("GET", path, nil)); s != subscriptions.CircuitOpen {
			t.Errorf("paused: %s, want open still", s)
		}
		if s := state(a.Do("PATCH", path, map[string]any{"status": "ACTIVE"})); s != subscriptions.CircuitClosed {
			t.Errorf("resumed: %s, want closed", s)
		}
		open()
		if s := state(a.Do("PATCH", path, map[string]any{"pushUrl": "https://example.com/other"})); s != subscriptions.CircuitClosed {
			t.Errorf("with a new push URL: %s, want closed", s)
		}

		r = a.Do("POST", "/v1/rooms/orders/subscriptions", map[string]any{"type": "PULL", "eventTypes": []any{map[string]any{"eventType": "order.created"}}})
		apptest.Want(t, r, http.StatusCreated)
		pull := apptest.Decode[subscriptions.Response](t, r)
		if pull.Circuit != nil || pull.CircuitBreaker != nil || pull.MaxDeliveryRate != nil {
			t.Errorf("a PULL subscription shows a circuit, breaker or rate: %s", r.Body)
		}
		apptest.Want(t, a.Do("POST", "/v1/rooms/orders/subscriptions/"+pull.ID+"/circuit:reset", nil), http.StatusConflict)
		apptest.Want(t, a.Do("PATCH", path, map[string]any{"status": "TERMINATED"}), http.StatusOK)
		apptest.Want(t, a.Do("POST", path+"/circuit:reset", nil), http.StatusConflict)
		apptest.Want(t, a.Do("POST", "/v1/rooms/orders/subscriptions/0190b5a8-0000-7000-8000-000000000000/circuit:reset", nil), http.StatusNotFound)
	})
}

func uuidOf(t *testing.T, s string) uuid.UUID {
	t.Helper()
	id, err := uuid.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return id
}
