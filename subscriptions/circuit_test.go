package subscriptions_test

import (
	"slices"
	"testing"

	"github.com/roomhub/messaging-api/api"
)

// TestCircuitBreakerRefusedAlike: a room and a PUSH subscription refuse
// the same circuit breaker settings alike, naming the field.
func TestCircuitBreakerRefusedAlike(t *testing.T) {
	t.Parallel()
	h := setupDelivery(t)
	for _, tc := range []struct {
		name, body string
		fields     []string
	}{
		{"failure rate zero", `{"circuitBreaker":{"failureRate":0}}`, []string{"circuitBreaker.failureRate"}},
		{"failure rate above 1", `{"circuitBreaker":{"failureRate":1.5}}`, []string{"circuitBreaker.failureRate"}},
		{"window too small", `{"circuitBreaker":{"window":5,"minimumAttempts":5}}`, []string{"circuitBreaker.window"}},
		{"window too large", `{"circuitBreaker":{"window":1001}}`, []string{"circuitBreaker.window"}},
		{"minimum attempts zero", `{"circuitBreaker":{"minimumAttempts":0}}`, []string{"circuitBreaker.minimumAttempts"}},
		{"minimum attempts above the window", `{"circuitBreaker":{"window":30,"minimumAttempts":31}}`, []string{"circuitBreaker.minimumAttempts"}},
		{"cool-down too short", `{"circuitBreaker":{"cooldown":999}}`, []string{"circuitBreaker.cooldown"}},
		{"cap too long", `{"circuitBreaker":{"maxCooldown":86400001}}`, []string{"circuitBreaker.maxCooldown"}},
		{"cap below the cool-down", `{"circuitBreaker":{"cooldown":5000,"maxCooldown":4000}}`, []string{"circuitBreaker.maxCooldown"}},
		{"enabled not a boolean", `{"circuitBreaker":{"enabled":"yes"}}`, []string{"circuitBreaker.enabled"}},
		{"unknown field", `{"circuitBreaker":{"cooldowns":5000}}`, []string{"circuitBreaker.cooldowns"}},
		{"not an object", `{"circuitBreaker":5}`, []string{"circuitBreaker"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			room, sub := h.patchRoom(t, tc.body), h.patchPush(t, tc.body)
			if room.Status != 422 || sub.Status != 422 {
				t.Fatalf("status: room %d, subscription %d, want 422", room.Status, sub.Status)
			}
			if got := fieldsOf(room); !slices.Equal(got, tc.fields) {
				t.Errorf("room fields %q, want %q", got, tc.fields)
			}
			if got := fieldsOf(sub); !slices.Equal(got, tc.fields) {
				t.Errorf("subscription fields %q, want %q", got, tc.fields)
			}
			if r, s := rangesOf(room), rangesOf(sub); !slices.Equal(r, s) {
				t.Errorf("messages differ:\nroom         %q\nsubscription %q", r, s)
			}
		})
	}
}

// TestCircuitBreakerPartsWithRoom: where a room and a subscription part. A
// room's settings must agree with the defaults of the fields it leaves out;
// a subscription's fields go over the room's, which it cannot see, so the
// combination is clamped instead. Only PUSH subscriptions have a breaker and
// a delivery rate.
func TestCircuitBreakerPartsWithRoom(t *testing.T) {
	t.Parallel()
	h := setupDelivery(t)
	for _, tc := range []struct {
		name, body                  string
		roomFields, push, pullField []string // nil: accepted
	}{
		{"window below the default minimum", `{"circuitBreaker":{"window":10}}`, []string{"circuitBreaker.window"}, nil, []string{"circuitBreaker"}},
		{"cool-down above the default cap", `{"circuitBreaker":{"cooldown":700000}}`, []string{"circuitBreaker.cooldown"}, nil, []string{"circuitBreaker"}},
		{"breaker off", `{"circuitBreaker":{"enabled":false}}`, nil, nil, []string{"circuitBreaker"}},
		{"breaker null", `{"circuitBreaker":null}`, nil, nil, nil},
		{"rate", `{"maxDeliveryRate":20}`, []string{"maxDeliveryRate"}, nil, []string{"maxDeliveryRate"}},
		{"rate null", `{"maxDeliveryRate":null}`, []string{"maxDeliveryRate"}, nil, nil},
		{"rate zero", `{"maxDeliveryRate":0}`, []string{"maxDeliveryRate"}, []string{"maxDeliveryRate"}, []string{"maxDeliveryRate"}},
		{"rate too low", `{"maxDeliveryRate":0.005}`, []string{"maxDeliveryRate"}, []string{"maxDeliveryRate"}, []string{"maxDeliveryRate"}},
		{"rate too high", `{"maxDeliveryRate":100001}`, []string{"maxDeliveryRate"}, []string{"maxDeliveryRate"}, []string{"maxDeliveryRate"}},
		{"rate a string", `{"maxDeliveryRate":"5"}`, []string{"maxDeliveryRate"}, []string{"maxDeliveryRate"}, []string{"maxDeliveryRate"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := fieldsOf(h.patchRoom(t, tc.body)); !slices.Equal(got, tc.roomFields) {
				t.Errorf("room refused %q, want %q", got, tc.roomFields)
			}
			if got := fieldsOf(h.patchPush(t, tc.body)); !slices.Equal(got, tc.push) {
				t.Errorf("PUSH subscription refused %q, want %q", got, tc.push)
			}
			if got := fieldsOf(h.patchSubscription(t, tc.body)); !slices.Equal(got, tc.pullField) {
				t.Errorf("PULL subscription refused %q, want %q", got, tc.pullField)
			}
		})
	}
}

func (h deliveryHarness) patchPush(t *testing.T, body string) api.Problem {
	t.Helper()
	h.subs.store.reset()
	return patch(t, h.subs.e, "/v1/rooms/orders/subscriptions/"+fuzzPushID.String(), body)
}
