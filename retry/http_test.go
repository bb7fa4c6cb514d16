package retry_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/roomhub/messaging-api/app/apptest"
	"github.com/roomhub/messaging-api/retry"
	"github.com/roomhub/messaging-api/store"
)

// The tests of this file cover retry policies through apptest, so that
// every answer is checked against openapi.yaml: validation of the policy
// fields on rooms, subscriptions and the preview, their round trip through
// both stores, and the schedules the two retry-schedule endpoints compute.
// Helpers are prefixed rt (retry).

// rtStep is the phase and base delay a schedule should give one retry.
type rtStep struct {
	Phase string
	Delay int64
}

// rtExp is the steps of the exponential backoff retry with these delays.
func rtExp(delays ...int64) []rtStep {
	out := make([]rtStep, len(delays))
	for i, d := range delays {
		out[i] = rtStep{"exponential", d}
	}
	return out
}

// rtPolicyBody is the four-phase policy most tests use: 1 immediate retry, 1
// after MIN 1000, 3 from 1000 to 3000 (linear: 1000, 2000, 3000), 1 after
// MAX 3000, so 7 attempts.
const rtPolicyBody = `{"retriesWithNoDelay":1,"minimumDelayRetries":1,"minimumDelay":1000,"backoffRetries":3,"maximumDelay":3000,"maximumDelayRetries":1}`

// rtPolicySteps is the schedule of rtPolicyBody.
var rtPolicySteps = []rtStep{
	{"immediate", 0}, {"pre-backoff", 1000},
	{"backoff", 1000}, {"backoff", 2000}, {"backoff", 3000},
	{"post-backoff", 3000},
}

// rtCanonical re-encodes a JSON document with sorted keys, so that two
// documents compare as strings.
func rtCanonical(t *testing.T, raw []byte) string {
	t.Helper()
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("not JSON: %v: %s", err, raw)
	}
	out, _ := json.Marshal(v)
	return string(out)
}

// rtJSONEqual fails unless got (a decoded JSON value) is the document want.
func rtJSONEqual(t *testing.T, what string, got any, want string) {
	t.Helper()
	raw, _ := json.Marshal(got)
	if g, w := rtCanonical(t, raw), rtCanonical(t, []byte(want)); g != w {
		t.Errorf("%s = %s, want %s", what, g, w)
	}
}

// rtDecode reads a 200 retry-schedule answer.
func rtDecode(t *testing.T, r apptest.Response) retry.ScheduleResponse {
	t.Helper()
	apptest.Want(t, r, http.StatusOK)
	return apptest.Decode[retry.ScheduleResponse](t, r)
}

// rtCheckSteps fails unless s (without jitter) has exactly these retries:
// numbered from attempt 2, each delay exact, and the time since the first
// attempt their running sum.
func rtCheckSteps(t *testing.T, s retry.ScheduleResponse, steps []rtStep) {
	t.Helper()
	if s.MaxAttempts != len(steps)+1 || len(s.Attempts) != len(steps) {
		t.Fatalf("maxAttempts %d with %d retries, want %d retries: %+v", s.MaxAttempts, len(s.Attempts), len(steps), s.Attempts)
	}
	var since int64
	for i, st := range steps {
		since += st.Delay
		want := retry.AttemptResponse{Attempt: i + 2, Phase: st.Phase, Delay: st.Delay, DelayMin: st.Delay, DelayMax: st.Delay,
			SinceFirstAttempt: since, SinceFirstAttemptMin: since, SinceFirstAttemptMax: since}
		if s.Attempts[i] != want {
			t.Errorf("attempts[%d] = %+v, want %+v", i, s.Attempts[i], want)
		}
	}
}

// rtCheckJitter fails unless every retry of s has jitter pct/100 and the
// range KIP-580 gives: ⌊delay·(1 − j)⌋ to ⌊delay·(1 + j)⌋ capped at limit,
// computed here in integers so that the expectation is exact; the times
// since the first attempt are the running sums of each bound.
func rtCheckJitter(t *testing.T, s retry.ScheduleResponse, pct, limit int64) {
	t.Helper()
	var lo, hi int64
	for i, a := range s.Attempts {
		wantMin, wantMax := a.Delay*(100-pct)/100, min(a.Delay*(100+pct)/100, limit)
		lo, hi = lo+wantMin, hi+wantMax
		if a.Jitter != float64(pct)/100 || a.DelayMin != wantMin || a.DelayMax != wantMax ||
			a.SinceFirstAttemptMin != lo || a.SinceFirstAttemptMax != hi {
			t.Errorf("attempts[%d] = %+v, want jitter %v, delayMin %d, delayMax %d, sinceFirstAttemptMin %d, sinceFirstAttemptMax %d",
				i, a, float64(pct)/100, wantMin, wantMax, lo, hi)
		}
	}
}

// rtSetupRoom creates room with the JSON members roomFields, an event type
// "tick" with one version, and a PULL subscription with the JSON members
// subFields; it returns the subscription's path.
func rtSetupRoom(t *testing.T, a *apptest.API, room, roomFields, subFields string) string {
	t.Helper()
	body := `{"identifier":"` + room + `","managerIdentifier":"m"`
	if roomFields != "" {
		body += "," + roomFields
	}
	apptest.Want(t, a.Do("POST", "/v1/rooms", body+"}"), http.StatusCreated)
	apptest.Want(t, a.Do("POST", "/v1/rooms/"+room+"/event-types", `{"identifier":"tick"}`), http.StatusCreated)
	apptest.Want(t, a.Do("POST", "/v1/rooms/"+room+"/event-types/tick/versions", `{"schema":true}`), http.StatusCreated)
	body = `{"type":"PULL","eventTypes":[{"eventType":"tick"}]`
	if subFields != "" {
		body += "," + subFields
	}
	r := a.Do("POST", "/v1/rooms/"+room+"/subscriptions", body+"}")
	apptest.Want(t, r, http.StatusCreated)
	return "/v1/rooms/" + room + "/subscriptions/" + r.JSON(t)["id"].(string)
}

// TestRetryPolicyValidation sends bad delivery settings through every
// request that takes them (rooms, subscriptions, the preview) and checks
// each gets a 422 naming exactly the field at fault; then good edge values,
// which every one of them accepts.
func TestRetryPolicyValidation(t *testing.T) {
	t.Parallel()
	// on says where a case applies: r room (POST, PATCH), s subscription
	// (POST, PATCH), p preview.
	bad := []struct {
		name string
		on   string
		frag string // JSON members of the body
		// fields the 422 must name, and no other; "?field" may be named
		// too (a count over 1000 makes the total too many as well).
		fields []string
	}{
		{"retriesWithNoDelay negative", "rsp", `"retryPolicy":{"retriesWithNoDelay":-1}`, []string{"retryPolicy.retriesWithNoDelay"}},
		{"retriesWithNoDelay too many", "rsp", `"retryPolicy":{"retriesWithNoDelay":1001}`, []string{"retryPolicy.retriesWithNoDelay", "?retryPolicy"}},
		{"minimumDelayRetries negative", "rsp", `"retryPolicy":{"minimumDelayRetries":-2}`, []string{"retryPolicy.minimumDelayRetries"}},
		{"backoffRetries negative", "rsp", `"retryPolicy":{"backoffRetries":-1}`, []string{"retryPolicy.backoffRetries"}},
		{"maximumDelayRetries negative", "rsp", `"retryPolicy":{"maximumDelayRetries":-1}`, []string{"retryPolicy.maximumDelayRetries"}},
		{"maximumDelayRetries fraction", "rsp", `"retryPolicy":{"maximumDelayRetries":2.5}`, []string{"retryPolicy.maximumDelayRetries"}},
		{"backoffRetries string", "rsp", `"retryPolicy":{"backoffRetries":"3"}`, []string{"retryPolicy.backoffRetries"}},
		{"minimumDelay negative", "rsp", `"retryPolicy":{"minimumDelay":-1}`, []string{"retryPolicy.minimumDelay"}},
		{"delays over a week", "rsp", `"retryPolicy":{"minimumDelay":604800001,"maximumDelay":604800001}`, []string{"retryPolicy.minimumDelay", "retryPolicy.maximumDelay"}},
		{"maximumDelay negative", "rsp", `"retryPolicy":{"maximumDelay":-5}`, []string{"retryPolicy.maximumDelay"}},
		{"maximumDelay string", "rsp", `"retryPolicy":{"maximumDelay":"30s"}`, []string{"retryPolicy.maximumDelay"}},
		{"MIN above MAX", "rsp", `"retryPolicy":{"minimumDelay":10000,"maximumDelay":5000}`, []string{"retryPolicy.maximumDelay"}},
		{"MIN above the default MAX", "rsp", `"retryPolicy":{"minimumDelay":40000}`, []string{"retryPolicy.minimumDelay"}},
		{"function unknown", "rsp", `"retryPolicy":{"retryBackoffFunction":"cubic"}`, []string{"retryPolicy.retryBackoffFunction"}},
		{"function capitalised", "rsp", `"retryPolicy":{"retryBackoffFunction":"Linear"}`, []string{"retryPolicy.retryBackoffFunction"}},
		{"function empty", "rsp", `"retryPolicy":{"retryBackoffFunction":""}`, []string{"retryPolicy.retryBackoffFunction"}},
		{"function number", "rsp", `"retryPolicy":{"retryBackoffFunction":5}`, []string{"retryPolicy.retryBackoffFunction"}},
		{"jitter above 1", "rsp", `"retryPolicy":{"jitter":1.5}`, []string{"retryPolicy.jitter"}},
		{"jitter negative", "rsp", `"retryPolicy":{"jitter":-0.1}`, []string{"retryPolicy.jitter"}},
		{"jitter string", "rsp", `"retryPolicy":{"jitter":"0.2"}`, []string{"retryPolicy.jitter"}},
		{"geometric from MIN 0", "rsp", `"retryPolicy":{"retryBackoffFunction":"geometric","minimumDelay":0}`, []string{"retryPolicy.minimumDelay"}},
		{"1001 attempts", "rsp", `"retryPolicy":{"retriesWithNoDelay":1000,"minimumDelayRetries":0,"backoffRetries":0,"maximumDelayRetries":0}`, []string{"retryPolicy"}},
		{"too many attempts with defaults", "rsp", `"retryPolicy":{"retriesWithNoDelay":990}`, []string{"retryPolicy"}},
		// Decoded strictly like the rest of the body, and named with its path.
		{"unknown field in the policy", "rsp", `"retryPolicy":{"maxDelay":5000}`, []string{"retryPolicy.maxDelay"}},
		{"policy a number", "rsp", `"retryPolicy":5`, []string{"retryPolicy"}},
		{"policy an array", "rsp", `"retryPolicy":[]`, []string{"retryPolicy"}},
		{"ignoreSubscriptionOverride on a subscription", "s", `"retryPolicy":{"ignoreSubscriptionOverride":true}`, []string{"retryPolicy.ignoreSubscriptionOverride"}},
		{"ignoreSubscriptionOverride false on a subscription", "s", `"retryPolicy":{"ignoreSubscriptionOverride":false}`, []string{"retryPolicy.ignoreSubscriptionOverride"}},
		{"ignoreSubscriptionOverride string", "rsp", `"retryPolicy":{"ignoreSubscriptionOverride":"yes"}`, []string{"retryPolicy.ignoreSubscriptionOverride"}},
		{"maxDeliveryDelay 0", "rsp", `"maxDeliveryDelay":0`, []string{"maxDeliveryDelay"}},
		{"maxDeliveryDelay negative", "rsp", `"maxDeliveryDelay":-1`, []string{"maxDeliveryDelay"}},
		{"maxDeliveryDelay over a week", "rsp", `"maxDeliveryDelay":604800001`, []string{"maxDeliveryDelay"}},
		{"maxDeliveryDelay fraction", "rsp", `"maxDeliveryDelay":1.5`, []string{"maxDeliveryDelay"}},
		{"deliveryJitter 1.5", "rsp", `"deliveryJitter":1.5`, []string{"deliveryJitter"}},
		{"deliveryJitter negative", "rsp", `"deliveryJitter":-0.01`, []string{"deliveryJitter"}},
		{"deliveryJitter null", "rp", `"deliveryJitter":null`, []string{"deliveryJitter"}},
		{"every problem at once", "rsp", `"retryPolicy":{"backoffRetries":-1,"jitter":2,"retryBackoffFunction":"x"},"maxDeliveryDelay":0`,
			[]string{"retryPolicy.backoffRetries", "retryPolicy.jitter", "retryPolicy.retryBackoffFunction", "maxDeliveryDelay"}},
	}
	good := []struct {
		name string
		on   string
		frag string
	}{
		{"empty policy", "rsp", `"retryPolicy":{}`},
		{"null policy", "rsp", `"retryPolicy":null`},
		{"MIN = MAX = 0", "rsp", `"retryPolicy":{"minimumDelay":0,"maximumDelay":0}`},
		{"MIN = MAX", "rsp", `"retryPolicy":{"minimumDelay":7000,"maximumDelay":7000}`},
		{"a week", "rsp", `"retryPolicy":{"minimumDelay":604800000,"maximumDelay":604800000}`},
		{"geometric from MIN 0 with one backoff retry", "rsp", `"retryPolicy":{"retryBackoffFunction":"geometric","minimumDelay":0,"backoffRetries":1}`},
		{"another function", "rsp", `"retryPolicy":{"retryBackoffFunction":"arithmetic"}`},
		{"exactly 1000 attempts", "rsp", `"retryPolicy":{"retriesWithNoDelay":999,"minimumDelayRetries":0,"backoffRetries":0,"maximumDelayRetries":0}`},
		{"a single attempt", "rsp", `"retryPolicy":{"retriesWithNoDelay":0,"minimumDelayRetries":0,"backoffRetries":0,"maximumDelayRetries":0}`},
		{"jitter 0 and 1", "rsp", `"retryPolicy":{"jitter":1},"deliveryJitter":0`},
		{"deliveryJitter 1", "rsp", `"deliveryJitter":1`},
		{"ignoreSubscriptionOverride on a room", "rp", `"retryPolicy":{"ignoreSubscriptionOverride":false}`},
		{"maxDeliveryDelay bounds", "rsp", `"maxDeliveryDelay":1`},
		{"maxDeliveryDelay a week", "rsp", `"maxDeliveryDelay":604800000`},
		{"maxDeliveryDelay null", "rsp", `"maxDeliveryDelay":null`},
		{"deliveryJitter null on a subscription", "s", `"deliveryJitter":null`},
	}

	a := apptest.New(t, store.SQLite)
	a.Seed(t)
	r := a.Do("POST", "/v1/rooms/orders/subscriptions", `{"type":"PUSH","pushUrl":"https://receiver.example/hook","eventTypes":[{"eventType":"order.created"}]}`)
	apptest.Want(t, r, http.StatusCreated)
	sub := "/v1/rooms/orders/subscriptions/" + r.JSON(t)["id"].(string)
	// Settings a refused request must leave as they are.
	const roomBefore, subBefore = `{"backoffRetries":4}`, `{"backoffRetries":2}`
	apptest.Want(t, a.Do("PATCH", "/v1/rooms/orders", `{"retryPolicy":`+roomBefore+`,"maxDeliveryDelay":9000,"deliveryJitter":0.5}`), http.StatusOK)
	apptest.Want(t, a.Do("PATCH", sub, `{"retryPolicy":`+subBefore+`,"maxDeliveryDelay":8000,"deliveryJitter":0.25}`), http.StatusOK)

	n := 0
	targets := []struct {
		name, on string
		send     func(frag string) apptest.Response
	}{
		{"POST room", "r", func(frag string) apptest.Response {
			n++
			return a.Do("POST", "/v1/rooms", fmt.Sprintf(`{"identifier":"room-%d","managerIdentifier":"m",%s}`, n, frag))
		}},
		{"PATCH room", "r", func(frag string) apptest.Response { return a.Do("PATCH", "/v1/rooms/orders", "{"+frag+"}") }},
		{"POST subscription", "s", func(frag string) apptest.Response {
			return a.Do("POST", "/v1/rooms/orders/subscriptions", `{"type":"PULL","eventTypes":[{"eventType":"order.created"}],`+frag+`}`)
		}},
		{"PATCH subscription", "s", func(frag string) apptest.Response { return a.Do("PATCH", sub, "{"+frag+"}") }},
		{"preview", "p", func(frag string) apptest.Response { return a.Do("POST", "/v1/retry-schedule:preview", "{"+frag+"}") }},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			for _, tg := range targets {
				if !strings.Contains(tc.on, tg.on) {
					continue
				}
				t.Run(tg.name, func(t *testing.T) {
					r := tg.send(tc.frag)
					for _, f := range tc.fields {
						if !strings.HasPrefix(f, "?") {
							apptest.WantField(t, r, f)
						}
					}
					for _, f := range apptest.Fields(t, r) {
						if !slices.Contains(tc.fields, f) && !slices.Contains(tc.fields, "?"+f) {
							t.Errorf("422 also names %q; want only %v", f, tc.fields)
						}
					}
				})
			}
		})
	}

	t.Run("refused requests change nothing", func(t *testing.T) {
		r := a.Do("GET", "/v1/rooms/orders", nil)
		apptest.Want(t, r, http.StatusOK)
		m := r.JSON(t)
		rtJSONEqual(t, "room retryPolicy", m["retryPolicy"], roomBefore)
		if m["maxDeliveryDelay"] != 9000.0 || m["deliveryJitter"] != 0.5 {
			t.Errorf("room: %s", r.Body)
		}
		r = a.Do("GET", sub, nil)
		apptest.Want(t, r, http.StatusOK)
		m = r.JSON(t)
		rtJSONEqual(t, "subscription retryPolicy", m["retryPolicy"], subBefore)
		if m["maxDeliveryDelay"] != 8000.0 || m["deliveryJitter"] != 0.25 {
			t.Errorf("subscription: %s", r.Body)
		}
	})

	for _, tc := range good {
		t.Run("accepts "+tc.name, func(t *testing.T) {
			for _, tg := range targets {
				if !strings.Contains(tc.on, tg.on) {
					continue
				}
				t.Run(tg.name, func(t *testing.T) {
					r := tg.send(tc.frag)
					if r.Status != http.StatusOK && r.Status != http.StatusCreated {
						t.Errorf("status %d, want 200 or 201: %s", r.Status, r.Body)
					}
				})
			}
		})
	}
}

// TestRetryPolicyRoundTrip: the new settings of rooms and subscriptions are
// stored and read back as given, in both databases; a policy is replaced as
// a whole, and null clears it.
func TestRetryPolicyRoundTrip(t *testing.T) {
	t.Parallel()
	apptest.ForEachDialect(t, func(t *testing.T, a *apptest.API) {
		r := a.Do("POST", "/v1/rooms", `{"identifier":"plain","managerIdentifier":"m"}`)
		apptest.Want(t, r, http.StatusCreated)
		if m := r.JSON(t); m["maxDeliveryDelay"] != nil || m["deliveryJitter"] != 0.0 || m["retryPolicy"] != nil {
			t.Errorf("defaults: %s", r.Body)
		}

		// Zeros are values, not absences: they must survive the store.
		const policy = `{"retriesWithNoDelay":0,"minimumDelayRetries":2,"minimumDelay":250,"backoffRetries":4,"maximumDelay":8000,` +
			`"maximumDelayRetries":1,"retryBackoffFunction":"arithmetic","jitter":0,"ignoreSubscriptionOverride":true}`
		r = a.Do("POST", "/v1/rooms", `{"identifier":"rp","managerIdentifier":"m","maxDeliveryDelay":60000,"deliveryJitter":0.3,"retryPolicy":`+policy+`}`)
		apptest.Want(t, r, http.StatusCreated)
		id := r.JSON(t)["id"].(string)
		for _, path := range []string{"", "/v1/rooms/rp", "/v1/rooms/" + id} {
			m := r.JSON(t)
			if path != "" {
				r2 := a.Do("GET", path, nil)
				apptest.Want(t, r2, http.StatusOK)
				m = r2.JSON(t)
			}
			rtJSONEqual(t, "retryPolicy of "+path, m["retryPolicy"], policy)
			if m["maxDeliveryDelay"] != 60000.0 || m["deliveryJitter"] != 0.3 {
				t.Errorf("%s: maxDeliveryDelay %v, deliveryJitter %v", path, m["maxDeliveryDelay"], m["deliveryJitter"])
			}
		}

		steps := []struct {
			patch    string
			policy   string // the room's retryPolicy after the patch
			maxDelay any
			jitter   float64
		}{
			{`{"retryPolicy":{"jitter":0.1}}`, `{"jitter":0.1}`, 60000.0, 0.3}, // replaced, not merged
			{`{"retryPolicy":{}}`, `{}`, 60000.0, 0.3},
			{`{"deliveryAttempts":5,"deliveryJitter":0}`, `{}`, 60000.0, 0}, // absent: kept
			{`{"retryPolicy":null,"maxDeliveryDelay":null}`, `null`, nil, 0},
			{`{"maxDeliveryDelay":604800000,"deliveryJitter":1}`, `null`, 604800000.0, 1},
		}
		for _, st := range steps {
			r = a.Do("PATCH", "/v1/rooms/rp", st.patch)
			apptest.Want(t, r, http.StatusOK)
			r2 := a.Do("GET", "/v1/rooms/rp", nil)
			apptest.Want(t, r2, http.StatusOK)
			for _, m := range []map[string]any{r.JSON(t), r2.JSON(t)} {
				rtJSONEqual(t, "retryPolicy after "+st.patch, m["retryPolicy"], st.policy)
				if m["maxDeliveryDelay"] != st.maxDelay || m["deliveryJitter"] != st.jitter {
					t.Errorf("after %s: maxDeliveryDelay %v, deliveryJitter %v; want %v, %v", st.patch, m["maxDeliveryDelay"], m["deliveryJitter"], st.maxDelay, st.jitter)
				}
			}
		}

		// A subscription's overrides, 0 included, and null for the room's.
		const subPolicy = `{"retriesWithNoDelay":2,"minimumDelayRetries":0,"minimumDelay":0,"backoffRetries":5,"maximumDelay":100,` +
			`"maximumDelayRetries":0,"retryBackoffFunction":"exponential","jitter":0.5}`
		path := rtSetupRoom(t, a, "subs", "", `"maxDeliveryDelay":5000,"deliveryJitter":0,"retryPolicy":`+subPolicy)
		r = a.Do("GET", path, nil)
		apptest.Want(t, r, http.StatusOK)
		m := r.JSON(t)
		rtJSONEqual(t, "subscription retryPolicy", m["retryPolicy"], subPolicy)
		if m["maxDeliveryDelay"] != 5000.0 || m["deliveryJitter"] != 0.0 {
			t.Errorf("subscription overrides: %s", r.Body)
		}
		r = a.Do("GET", "/v1/rooms/subs/subscriptions", nil)
		apptest.Want(t, r, http.StatusOK)
		rtJSONEqual(t, "listed subscription retryPolicy", r.JSON(t)["items"].([]any)[0].(map[string]any)["retryPolicy"], subPolicy)

		r = a.Do("PATCH", path, `{"retryPolicy":null,"maxDeliveryDelay":null,"deliveryJitter":null}`)
		apptest.Want(t, r, http.StatusOK)
		r = a.Do("GET", path, nil)
		apptest.Want(t, r, http.StatusOK)
		if m := r.JSON(t); m["retryPolicy"] != nil || m["maxDeliveryDelay"] != nil || m["deliveryJitter"] != nil {
			t.Errorf("after clearing the overrides: %s", r.Body)
		}
		r = a.Do("GET", "/v1/rooms/plain", nil) // a room with nothing set reads back the same
		apptest.Want(t, r, http.StatusOK)
		if m := r.JSON(t); m["maxDeliveryDelay"] != nil || m["deliveryJitter"] != 0.0 || m["retryPolicy"] != nil {
			t.Errorf("plain room read back: %s", r.Body)
		}
	})
}

// TestRetrySchedulePrecedence: a subscription's retry schedule follows the
// precedence docs/api-guide.md states, with the exact delays of each case.
func TestRetrySchedulePrecedence(t *testing.T) {
	t.Parallel()
	const (
		roomEBR   = `"deliveryDelay":100,"deliveryDelayMultiplier":3,"deliveryAttempts":4`
		resolved  = `"retriesWithNoDelay":1,"minimumDelayRetries":1,"minimumDelay":1000,"backoffRetries":3,"maximumDelay":3000,"maximumDelayRetries":1,"retryBackoffFunction":"linear","jitter":0`
		roomFour  = `{"kind":"fourPhase","source":"room","retryPolicy":{` + resolved + `,"ignoreSubscriptionOverride":false}}`
		roomIgnor = `{"kind":"fourPhase","source":"room","retryPolicy":{` + resolved + `,"ignoreSubscriptionOverride":true}}`
	)
	cases := []struct {
		name       string
		room, sub  string // JSON members of each
		wantPolicy string
		steps      []rtStep
	}{
		{
			"room exponential backoff", roomEBR, "",
			`{"kind":"exponential","source":"room","deliveryDelay":100,"deliveryDelayMultiplier":3,"deliveryAttempts":4,"maxDeliveryDelay":604800000,"deliveryJitter":0}`,
			rtExp(300, 900, 2700), // 100 × 3^k
		},
		{
			"room exponential backoff with a cap", roomEBR + `,"maxDeliveryDelay":1000`, "",
			`{"kind":"exponential","source":"room","deliveryDelay":100,"deliveryDelayMultiplier":3,"deliveryAttempts":4,"maxDeliveryDelay":1000,"deliveryJitter":0}`,
			rtExp(300, 900, 1000),
		},
		{
			"subscription fields override the room's", roomEBR, `"deliveryDelay":200,"deliveryAttempts":5,"maxDeliveryDelay":5000`,
			`{"kind":"exponential","source":"room with subscription overrides","deliveryDelay":200,"deliveryDelayMultiplier":3,"deliveryAttempts":5,"maxDeliveryDelay":5000,"deliveryJitter":0}`,
			rtExp(600, 1800, 5000, 5000), // 200 × 3^k capped at 5000
		},
		{
			"a zero override is an override", roomEBR + `,"deliveryJitter":0.5`, `"deliveryJitter":0`,
			`{"kind":"exponential","source":"room with subscription overrides","deliveryDelay":100,"deliveryDelayMultiplier":3,"deliveryAttempts":4,"maxDeliveryDelay":604800000,"deliveryJitter":0}`,
			rtExp(300, 900, 2700),
		},
		{
			"room four-phase policy", roomEBR + `,"retryPolicy":` + rtPolicyBody, `"deliveryDelay":50,"deliveryAttempts":9`,
			roomFour, rtPolicySteps, // the subscription's field overrides do not apply
		},
		{
			"subscription policy replaces the room's", `"retryPolicy":` + rtPolicyBody,
			`"retryPolicy":{"retriesWithNoDelay":0,"minimumDelayRetries":0,"minimumDelay":100,"backoffRetries":2,"maximumDelayRetries":0}`,
			`{"kind":"fourPhase","source":"subscription","retryPolicy":{"retriesWithNoDelay":0,"minimumDelayRetries":0,"minimumDelay":100,"backoffRetries":2,"maximumDelay":30000,"maximumDelayRetries":0,"retryBackoffFunction":"linear","jitter":0,"ignoreSubscriptionOverride":false}}`,
			[]rtStep{{"backoff", 100}, {"backoff", 30000}}, // the default MAX, not the room's 3000
		},
		{
			"subscription policy replaces exponential backoff", roomEBR,
			`"deliveryDelay":7,"retryPolicy":{"retriesWithNoDelay":2,"minimumDelayRetries":0,"minimumDelay":100,"backoffRetries":0,"maximumDelayRetries":1,"maximumDelay":700}`,
			`{"kind":"fourPhase","source":"subscription","retryPolicy":{"retriesWithNoDelay":2,"minimumDelayRetries":0,"minimumDelay":100,"backoffRetries":0,"maximumDelay":700,"maximumDelayRetries":1,"retryBackoffFunction":"linear","jitter":0,"ignoreSubscriptionOverride":false}}`,
			[]rtStep{{"immediate", 0}, {"immediate", 0}, {"post-backoff", 700}},
		},
		{
			"room ignoreSubscriptionOverride wins", `"retryPolicy":` + strings.TrimSuffix(rtPolicyBody, "}") + `,"ignoreSubscriptionOverride":true}`,
			`"deliveryDelay":5,"deliveryJitter":0.9,"retryPolicy":{"backoffRetries":1}`,
			roomIgnor, rtPolicySteps,
		},
	}
	apptest.ForEachDialect(t, func(t *testing.T, a *apptest.API) {
		for i, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				path := rtSetupRoom(t, a, fmt.Sprintf("prec-%d", i), tc.room, tc.sub)
				s := rtDecode(t, a.Do("GET", path+"/retry-schedule", nil))
				rtJSONEqual(t, "policy", s.Policy, tc.wantPolicy)
				rtCheckSteps(t, s, tc.steps)
			})
		}

		t.Run("jitter override", func(t *testing.T) {
			path := rtSetupRoom(t, a, "jitter", roomEBR, `"deliveryJitter":0.5`)
			s := rtDecode(t, a.Do("GET", path+"/retry-schedule", nil))
			rtJSONEqual(t, "policy", s.Policy,
				`{"kind":"exponential","source":"room with subscription overrides","deliveryDelay":100,"deliveryDelayMultiplier":3,"deliveryAttempts":4,"maxDeliveryDelay":604800000,"deliveryJitter":0.5}`)
			for i, d := range []int64{300, 900, 2700} {
				if s.Attempts[i].Delay != d {
					t.Errorf("attempts[%d].delay = %d, want %d", i, s.Attempts[i].Delay, d)
				}
			}
			rtCheckJitter(t, s, 50, 604800000)
		})

		t.Run("clearing the subscription's policy falls back to the room's", func(t *testing.T) {
			path := rtSetupRoom(t, a, "fallback", `"retryPolicy":`+rtPolicyBody, `"retryPolicy":{"backoffRetries":1}`)
			if got := rtDecode(t, a.Do("GET", path+"/retry-schedule", nil)); got.Policy.Source != "subscription" {
				t.Fatalf("policy %+v, want the subscription's", got.Policy)
			}
			apptest.Want(t, a.Do("PATCH", path, `{"retryPolicy":null}`), http.StatusOK)
			s := rtDecode(t, a.Do("GET", path+"/retry-schedule", nil))
			rtJSONEqual(t, "policy", s.Policy, roomFour)
			rtCheckSteps(t, s, rtPolicySteps)

			// And a room policy removed falls back to its exponential backoff.
			apptest.Want(t, a.Do("PATCH", "/v1/rooms/fallback", `{"retryPolicy":null}`), http.StatusOK)
			s = rtDecode(t, a.Do("GET", path+"/retry-schedule", nil))
			rtCheckSteps(t, s, rtExp(2000, 4000))
		})

		t.Run("by room id", func(t *testing.T) {
			path := rtSetupRoom(t, a, "by-id", roomEBR, "")
			r := a.Do("GET", "/v1/rooms/by-id", nil)
			apptest.Want(t, r, http.StatusOK)
			byID := strings.Replace(path, "/by-id/", "/"+r.JSON(t)["id"].(string)+"/", 1)
			rtCheckSteps(t, rtDecode(t, a.Do("GET", byID+"/retry-schedule", nil)), rtExp(300, 900, 2700))
		})

		t.Run("not found", func(t *testing.T) {
			path := rtSetupRoom(t, a, "nf", "", "")
			_, subID, _ := strings.Cut(path, "/subscriptions/")
			rtSetupRoom(t, a, "other", "", "")
			for _, p := range []string{
				"/v1/rooms/nope/subscriptions/" + subID,
				"/v1/rooms/nf/subscriptions/0190b5a8-0000-7000-8000-000000000000",
				"/v1/rooms/nf/subscriptions/not-a-uuid",
				"/v1/rooms/other/subscriptions/" + subID, // another room's subscription
			} {
				apptest.Want(t, a.Do("GET", p+"/retry-schedule", nil), http.StatusNotFound)
			}
		})
	})
}

// rtCurves are the four backoff functions for MIN 5000, MAX 260000, NUM 10,
// as the README's table gives them (ms).
var rtCurves = map[string][]int64{
	"linear":      {5000, 33333, 61666, 90000, 118333, 146666, 175000, 203333, 231666, 260000},
	"arithmetic":  {5000, 10666, 22000, 39000, 61666, 90000, 124000, 163666, 209000, 260000},
	"geometric":   {5000, 7755, 12031, 18662, 28949, 44906, 69658, 108053, 167612, 260000},
	"exponential": {5000, 5499, 6497, 8493, 12485, 20469, 36438, 68375, 132250, 260000},
}

// rtCurvePolicy is the preview body of the README's vector: only the backoff
// phase, with function f and jitter j.
func rtCurvePolicy(f, jitter string) string {
	return `{"retryPolicy":{"retriesWithNoDelay":0,"minimumDelayRetries":0,"maximumDelayRetries":0,` +
		`"minimumDelay":5000,"maximumDelay":260000,"backoffRetries":10,"retryBackoffFunction":"` + f + `","jitter":` + jitter + `}}`
}

// TestRetrySchedulePreview: the preview computes the schedules the README
// documents, jitter ranges included, and refuses what a room refuses.
func TestRetrySchedulePreview(t *testing.T) {
	t.Parallel()
	a := apptest.New(t, store.SQLite)
	preview := func(body any) apptest.Response { return a.Do("POST", "/v1/retry-schedule:preview", body) }

	t.Run("the README's curves", func(t *testing.T) {
		readme := rtReadmeCurves(t)
		for f, delays := range rtCurves {
			t.Run(f, func(t *testing.T) {
				if got := fmt.Sprint(readme[f]); got != fmt.Sprint(delays) {
					t.Errorf("README.md gives %s as %s, want %v", f, got, delays)
				}
				s := rtDecode(t, preview(rtCurvePolicy(f, "0")))
				if s.Policy.Kind != "fourPhase" || s.Policy.Source != "room" {
					t.Errorf("policy %+v", s.Policy)
				}
				steps := make([]rtStep, len(delays))
				for i, d := range delays {
					steps[i] = rtStep{"backoff", d}
				}
				rtCheckSteps(t, s, steps)
			})
		}
	})

	t.Run("jitter 0.2", func(t *testing.T) {
		for f, delays := range rtCurves {
			s := rtDecode(t, preview(rtCurvePolicy(f, "0.2")))
			for i, d := range delays {
				if s.Attempts[i].Delay != d {
					t.Errorf("%s: attempts[%d].delay = %d, want %d (jitter leaves the base delay)", f, i, s.Attempts[i].Delay, d)
				}
			}
			rtCheckJitter(t, s, 20, 260000) // the last: 312000 capped at MAX
		}
	})

	t.Run("jitter range is floored exactly", func(t *testing.T) {
		// 5000 × 1.3 is 6500 and 1000 × 0.93 is 930 exactly; computed in
		// floating point they come out a hair below and floor one ms short.
		for _, tc := range []struct {
			pct, limit int64
			body       string
		}{
			{30, 10000, `{"retryPolicy":{"retriesWithNoDelay":0,"minimumDelayRetries":1,"minimumDelay":5000,"backoffRetries":0,"maximumDelay":10000,"maximumDelayRetries":0,"jitter":0.3}}`},
			{7, 2000, `{"retryPolicy":{"retriesWithNoDelay":0,"minimumDelayRetries":1,"minimumDelay":1000,"backoffRetries":0,"maximumDelay":2000,"maximumDelayRetries":0,"jitter":0.07}}`},
			{30, 604800000, `{"deliveryDelay":5000,"deliveryDelayMultiplier":1,"deliveryAttempts":2,"deliveryJitter":0.3}`},
		} {
			rtCheckJitter(t, rtDecode(t, preview(tc.body)), tc.pct, tc.limit)
		}
	})

	t.Run("exponential backoff with jitter and a cap", func(t *testing.T) {
		s := rtDecode(t, preview(`{"deliveryDelay":500,"deliveryDelayMultiplier":3,"deliveryAttempts":6,"maxDeliveryDelay":30000,"deliveryJitter":0.2}`))
		rtJSONEqual(t, "policy", s.Policy,
			`{"kind":"exponential","source":"room","deliveryDelay":500,"deliveryDelayMultiplier":3,"deliveryAttempts":6,"maxDeliveryDelay":30000,"deliveryJitter":0.2}`)
		for i, d := range []int64{1500, 4500, 13500, 30000, 30000} { // 500 × 3^k, capped
			if s.Attempts[i].Delay != d || s.Attempts[i].Phase != "exponential" {
				t.Errorf("attempts[%d] = %+v, want delay %d", i, s.Attempts[i], d)
			}
		}
		rtCheckJitter(t, s, 20, 30000)
	})

	t.Run("four-phase with jitter", func(t *testing.T) {
		s := rtDecode(t, preview(`{"retryPolicy":`+strings.TrimSuffix(rtPolicyBody, "}")+`,"jitter":0.5}}`))
		for i, st := range rtPolicySteps {
			if s.Attempts[i].Delay != st.Delay || s.Attempts[i].Phase != st.Phase {
				t.Errorf("attempts[%d] = %+v, want %+v", i, s.Attempts[i], st)
			}
		}
		rtCheckJitter(t, s, 50, 3000) // capped at maximumDelay
	})

	t.Run("the default", func(t *testing.T) {
		for _, body := range []any{nil, "", "{}", `{"retryPolicy":null}`} {
			s := rtDecode(t, preview(body))
			rtJSONEqual(t, fmt.Sprintf("policy of %q", body), s.Policy,
				`{"kind":"exponential","source":"room","deliveryDelay":1000,"deliveryDelayMultiplier":2,"deliveryAttempts":3,"maxDeliveryDelay":604800000,"deliveryJitter":0}`)
			rtCheckSteps(t, s, rtExp(2000, 4000))
		}
		s := rtDecode(t, preview(`{"retryPolicy":{}}`))
		rtCheckSteps(t, s, []rtStep{
			{"immediate", 0}, {"immediate", 0}, {"immediate", 0},
			{"pre-backoff", 5000}, {"pre-backoff", 5000}, {"pre-backoff", 5000},
			{"backoff", 5000}, {"backoff", 7777}, {"backoff", 10555}, {"backoff", 13333}, {"backoff", 16111},
			{"backoff", 18888}, {"backoff", 21666}, {"backoff", 24444}, {"backoff", 27222}, {"backoff", 30000},
			{"post-backoff", 30000}, {"post-backoff", 30000}, {"post-backoff", 30000},
		})
	})

	t.Run("a single attempt", func(t *testing.T) {
		for _, body := range []string{
			`{"deliveryAttempts":0}`,
			`{"deliveryAttempts":1}`,
			`{"retryPolicy":{"retriesWithNoDelay":0,"minimumDelayRetries":0,"backoffRetries":0,"maximumDelayRetries":0}}`,
		} {
			rtCheckSteps(t, rtDecode(t, preview(body)), nil)
		}
	})

	t.Run("1000 attempts", func(t *testing.T) {
		s := rtDecode(t, preview(`{"retryPolicy":{"retriesWithNoDelay":0,"minimumDelayRetries":0,"backoffRetries":999,"maximumDelayRetries":0,"minimumDelay":1,"maximumDelay":604800000,"retryBackoffFunction":"exponential"}}`))
		if s.MaxAttempts != 1000 || len(s.Attempts) != 999 {
			t.Fatalf("maxAttempts %d with %d retries, want 1000 and 999", s.MaxAttempts, len(s.Attempts))
		}
		first, last := s.Attempts[0], s.Attempts[998]
		if first.Delay != 1 || last.Delay != 604800000 || last.Attempt != 1000 {
			t.Errorf("first %+v, last %+v; want 1 ms to a week", first, last)
		}
		for i := 1; i < len(s.Attempts); i++ {
			if s.Attempts[i].Delay < s.Attempts[i-1].Delay {
				t.Fatalf("delays fall at attempt %d: %d after %d", s.Attempts[i].Attempt, s.Attempts[i].Delay, s.Attempts[i-1].Delay)
			}
		}
	})

	t.Run("bad requests", func(t *testing.T) {
		for _, tc := range []struct {
			body   string
			status int
			field  string
		}{
			{`{"deliveryDelay":0}`, 422, "deliveryDelay"},
			{`{"deliveryDelay":null}`, 422, "deliveryDelay"},
			{`{"deliveryDelayMultiplier":0.5}`, 422, "deliveryDelayMultiplier"},
			{`{"deliveryAttempts":1001}`, 422, "deliveryAttempts"},
			{`{"messageExpiration":5}`, 422, "messageExpiration"}, // not a retry setting
			{`{"identifier":"x"}`, 422, "identifier"},
			{`[1]`, 422, "body"},
			{`{"deliveryDelay":`, 400, "body"},
			{`{} {}`, 400, "body"},
		} {
			r := preview(tc.body)
			apptest.Want(t, r, tc.status)
			if f := apptest.Fields(t, r); len(f) != 1 || f[0] != tc.field {
				t.Errorf("%s: names %v, want [%s]", tc.body, f, tc.field)
			}
		}
		apptest.Want(t, preview(`{"retryPolicy":{"backoffRetries":"`+strings.Repeat("9", 70<<10)+`"}}`), http.StatusRequestEntityTooLarge)
	})
}

// rtReadmeCurves reads the README's table of the four curves.
func rtReadmeCurves(t *testing.T) map[string][]int64 {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(apptest.RepoRoot(), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	const header = "| n | linear | arithmetic | geometric | exponential |"
	_, table, ok := strings.Cut(string(raw), header)
	if !ok {
		t.Fatalf("README.md has no %q", header)
	}
	names := []string{"linear", "arithmetic", "geometric", "exponential"}
	out := map[string][]int64{}
	for _, line := range strings.Split(table, "\n")[2:] {
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) != 5 {
			break
		}
		for i, name := range names {
			v, err := strconv.ParseInt(strings.TrimSpace(cells[i+1]), 10, 64)
			if err != nil {
				t.Fatalf("README.md curve table: %q: %v", line, err)
			}
			out[name] = append(out[name], v)
		}
	}
	return out
}
