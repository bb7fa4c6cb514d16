package app_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/roomhub/messaging-api/api"
	"github.com/roomhub/messaging-api/app"
	"github.com/roomhub/messaging-api/app/apptest"
	"github.com/roomhub/messaging-api/rooms"
	"github.com/roomhub/messaging-api/store"
	"github.com/roomhub/messaging-api/store/storetest"
)

// refusedFast sends a request that must be refused with a 422 naming field,
// at a JSON pointer starting with pointer, saying what the limit is, and
// quickly: the guard is generous, not a benchmark.
func refusedFast(t *testing.T, a *apptest.API, method, path string, body any, field, pointer, says string) {
	t.Helper()
	start := time.Now()
	r := a.Do(method, path, body)
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("answered after %v", d)
	}
	apptest.Want(t, r, http.StatusUnprocessableEntity)
	var p api.Problem
	if err := json.Unmarshal(r.Body, &p); err != nil {
		t.Fatal(err)
	}
	for _, f := range p.Errors {
		if f.Field == field && strings.HasPrefix(f.Pointer, pointer) && strings.Contains(f.Message, says) {
			return
		}
	}
	t.Errorf("no error names %s at %s… saying %q: %.2000s", field, pointer, says, r.Body)
}

// bigBodies is the test configuration with the default request body limit.
func bigBodies() app.Config {
	cfg := apptest.Config()
	cfg.HTTP.BodyLimit = 1 << 20
	return cfg
}

func TestSchemaLimitsOverHTTP(t *testing.T) {
	t.Parallel()
	a := apptest.NewConfig(t, store.SQLite, bigBodies())
	a.Seed(t)
	const path = "/v1/rooms/orders/event-types/order.created/versions"
	cases := []struct {
		name, schema, pointer, says string
	}{
		{"9000 levels deep", apptest.Nest(9000, `{}`), "/schema" + strings.Repeat("/items", 64), "more than 64 levels"},
		{"size", `{"description":"` + strings.Repeat("x", 300<<10) + `"}`, "/schema", "at most 262144"},
		{"values", `{"enum":[` + apptest.Repeat(rooms.MaxSchemaValues, "0") + `]}`, "/schema/enum/", "more than 20000 JSON values"},
		{"subschemas", `{"properties":{` + apptest.Repeat(rooms.MaxSubschemas, `"p%d":true`) + `}}`, "/schema/properties/", "more than 5000 subschemas"},
		{"references", `{"$defs":{"a":true},"properties":{` + apptest.Repeat(rooms.MaxSchemaRefs+1, `"p%d":{"$ref":"#/$defs/a"}`) + `}}`, "/schema/properties/", "more than 1000 references"},
		{"reference loop", `{"$ref":"#"}`, "/schema", "refers back to itself"},
		{"patterns", `{"properties":{` + apptest.Repeat(rooms.MaxSchemaPatterns+1, `"p%d":{"pattern":"^a"}`) + `}}`, "/schema/properties/", "more than 256 regular expressions"},
		{"pattern program", `{"pattern":"[a-z]{1000}x"}`, "/schema/pattern", "at most 1000 are allowed"},
		{"pattern ranges", `{"properties":{"a":{"pattern":"^\\pL{500}$"},"b":{"pattern":"^\\pL{500}$"}}}`, "/schema/properties/b/pattern", "more than 500000 ranges in all"},
		{"number", `{"maximum":1e999999}`, "/schema/maximum", "exponent beyond ±400"},
		{"checks per value", `{"anyOf":[` + apptest.Repeat(rooms.MaxChecksPerValue, `true`) + `]}`, "/schema", "could be checked against 1001 subschemas"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			refusedFast(t, a, "POST", path, `{"schema":`+tc.schema+`}`, "schema", tc.pointer, tc.says)
		})
	}
	t.Run("at the limits", func(t *testing.T) {
		schema := `{"$defs":{"d":{"type":"object","properties":{` + apptest.Repeat(100, `"x%d":{"type":"integer"}`) + `}}},"properties":{` +
			`"big":{"pattern":"^[\\pL\\pN]{660}$"},` + apptest.Repeat(6, `"p%d":{"type":"string","pattern":"^[a-z]{995}$"}`) + `,` +
			apptest.Repeat(rooms.MaxSubschemas-7-300, `"q%d":{"type":"string"}`) + `,` +
			apptest.Repeat(150, `"r%d":{"$ref":"#/$defs/d"}`) + `,"deep":` + apptest.Nest(30, `{"type":"string"}`) + `}}`
		start := time.Now()
		apptest.Want(t, a.Do("POST", path, `{"version":10,"schema":`+schema+`}`), http.StatusCreated)
		if d := time.Since(start); d > 10*time.Second { // a guard: it takes a fraction of a second
			t.Errorf("created after %v", d)
		}
		apptest.Want(t, a.Do("POST", "/v1/rooms/orders/messages", `{"eventType":"order.created","eventTypeVersion":10,"payload":{"q1":"x","r1":{"x1":1},"deep":[]}}`), http.StatusAccepted)
	})
}

func TestPayloadLimitsOverHTTP(t *testing.T) {
	t.Parallel()
	a := apptest.NewConfig(t, store.SQLite, bigBodies())
	a.Seed(t)
	// Every item is checked against 999 alternatives: a few hundred items fit
	// the validation budget, a few thousand do not.
	schema := `{"items":{"anyOf":[` + apptest.Repeat(rooms.MaxChecksPerValue-2, `{"type":"string"}`) + `]}}`
	apptest.Want(t, a.Do("POST", "/v1/rooms/orders/event-types/order.created/versions", `{"version":3,"schema":`+schema+`}`), http.StatusCreated)
	publish := func(payload string) string {
		return `{"eventType":"order.created","eventTypeVersion":3,"payload":` + payload + `}`
	}
	apptest.Want(t, a.Do("POST", "/v1/rooms/orders/messages", publish(`[`+apptest.Repeat(100, `"s"`)+`]`)), http.StatusAccepted)
	refusedFast(t, a, "POST", "/v1/rooms/orders/messages", publish(`[`+apptest.Repeat(50_000, `0`)+`]`), "payload", "/payload", "too large to check")
	refusedFast(t, a, "POST", "/v1/rooms/orders/messages", publish(strings.Repeat(`[`, 9000)+strings.Repeat(`]`, 9000)),
		"payload", "/payload"+strings.Repeat("/0", 64), "more than 64 levels")
	batch := `{"messages":[{"eventType":"order.created","payload":{"orderId":"1"}},{"eventType":"order.created","payload":{"orderId":"2","n":[1e401]}}]}`
	refusedFast(t, a, "POST", "/v1/rooms/orders/messages:batch", batch, "messages[1].payload", "/messages/1/payload/n/0", "exponent beyond ±400")
}

func TestRequestListLimits(t *testing.T) {
	t.Parallel()
	for _, d := range storetest.Dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			requestListLimits(t, apptest.NewConfig(t, d, bigBodies()))
		})
	}
}

func requestListLimits(t *testing.T, a *apptest.API) {
	a.Seed(t)
	sub := func(filters string) string { return `{"type":"PULL","eventTypes":[` + filters + `]}` }
	versions := func(n int) string {
		return `{"eventType":"order.created","versions":[` + apptest.Repeat(n, `%d`) + `]}`
	}
	const subs = "/v1/rooms/orders/subscriptions"

	refusedFast(t, a, "POST", subs, sub(versions(100_000)), "eventTypes[0].versions", "", "at most 100 versions")
	refusedFast(t, a, "POST", subs, sub(versions(101)), "eventTypes[0].versions", "", "at most 100 versions")
	refusedFast(t, a, "POST", subs, sub(apptest.Repeat(11, `{"eventType":"t%d","versions":[`+apptest.Repeat(100, `%d`)+`]}`)), "eventTypes", "", "at most 1000 versions in all")
	refusedFast(t, a, "POST", subs, sub(apptest.Repeat(101, `{"eventType":"t%d"}`)), "eventTypes", "", "at most 100 event types")

	// 100 versions, all checked in one lookup: 0 to 99, of which 0 does
	// not exist; then 1 to 100.
	for v := 3; v <= 100; v++ {
		apptest.Want(t, a.Do("POST", "/v1/rooms/orders/event-types/order.created/versions", fmt.Sprintf(`{"version":%d,"schema":{}}`, v)), http.StatusCreated)
	}
	refusedFast(t, a, "POST", subs, sub(versions(100)), "eventTypes[0].versions[0]", "", "version 0 of event type")
	apptest.Want(t, a.Do("POST", subs, sub(`{"eventType":"order.created","versions":[`+apptest.Repeat(99, `%d`)[2:]+`,99,100]}`)), http.StatusCreated)

	attrs := `{` + apptest.Repeat(50_000, `"a%d":"x"`) + `}`
	r := a.Do("POST", "/v1/rooms/orders/messages", `{"eventType":"order.created","payload":{"orderId":"1"},"attributes":`+attrs+`}`)
	apptest.Want(t, r, http.StatusUnprocessableEntity)
	var p api.Problem
	if err := json.Unmarshal(r.Body, &p); err != nil || len(p.Errors) != 1 || p.Errors[0].Field != "attributes" {
		t.Errorf("50000 attributes: want one problem naming attributes: %.500s", r.Body)
	}
	msg := `{"eventType":"order.created","payload":{"orderId":"1"}}`
	refusedFast(t, a, "POST", "/v1/rooms/orders/messages:batch", `{"messages":[`+strings.Repeat(msg+",", 100)+msg+`]}`, "messages", "", "1 to 100 messages")
}
