package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/roomhub/messaging-api/api"
	"github.com/roomhub/messaging-api/rooms"
	"github.com/roomhub/messaging-api/store"
	"github.com/roomhub/messaging-api/store/storetest"
)

// refusedFast sends a request that must be refused with a 422 naming field,
// at a JSON pointer starting with pointer, saying what the limit is, and
// quickly: the guard is generous, not a benchmark.
func refusedFast(t *testing.T, a *testAPI, method, path string, body any, field, pointer, says string) {
	t.Helper()
	start := time.Now()
	r := a.do(method, path, body)
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("answered after %v", d)
	}
	want(t, r, http.StatusUnprocessableEntity)
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
func bigBodies() Config {
	cfg := testConfig()
	cfg.HTTP.BodyLimit = 1 << 20
	return cfg
}

// items nests {"items": ...} n deep around inner.
func items(n int, inner string) string {
	return strings.Repeat(`{"items":`, n) + inner + strings.Repeat(`}`, n)
}

// repeat joins n copies of elem, each with %d replaced by its index.
func repeat(n int, elem string) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = strings.ReplaceAll(elem, "%d", strconv.Itoa(i))
	}
	return strings.Join(parts, ",")
}

func TestSchemaLimitsOverHTTP(t *testing.T) {
	t.Parallel()
	a := newTestAPIConfig(t, store.SQLite, bigBodies())
	a.seed(t)
	const path = "/v1/rooms/orders/event-types/order.created/versions"
	cases := []struct {
		name, schema, pointer, says string
	}{
		{"9000 levels deep", items(9000, `{}`), "/schema" + strings.Repeat("/items", 64), "more than 64 levels"},
		{"size", `{"description":"` + strings.Repeat("x", 300<<10) + `"}`, "/schema", "at most 262144"},
		{"values", `{"enum":[` + repeat(rooms.MaxSchemaValues, "0") + `]}`, "/schema/enum/", "more than 20000 JSON values"},
		{"subschemas", `{"properties":{` + repeat(rooms.MaxSubschemas, `"p%d":true`) + `}}`, "/schema/properties/", "more than 5000 subschemas"},
		{"references", `{"$defs":{"a":true},"properties":{` + repeat(rooms.MaxSchemaRefs+1, `"p%d":{"$ref":"#/$defs/a"}`) + `}}`, "/schema/properties/", "more than 1000 references"},
		{"reference loop", `{"$ref":"#"}`, "/schema", "refers back to itself"},
		{"patterns", `{"properties":{` + repeat(rooms.MaxSchemaPatterns+1, `"p%d":{"pattern":"^a"}`) + `}}`, "/schema/properties/", "more than 256 regular expressions"},
		{"pattern program", `{"pattern":"[a-z]{1000}x"}`, "/schema/pattern", "at most 1000 are allowed"},
		{"pattern ranges", `{"properties":{"a":{"pattern":"^\\pL{500}$"},"b":{"pattern":"^\\pL{500}$"}}}`, "/schema/properties/b/pattern", "more than 500000 ranges in all"},
		{"number", `{"maximum":1e999999}`, "/schema/maximum", "exponent beyond ±400"},
		{"checks per value", `{"anyOf":[` + repeat(rooms.MaxChecksPerValue, `true`) + `]}`, "/schema", "could be checked against 1001 subschemas"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			refusedFast(t, a, "POST", path, `{"schema":`+tc.schema+`}`, "schema", tc.pointer, tc.says)
		})
	}
	t.Run("at the limits", func(t *testing.T) {
		schema := `{"$defs":{"d":{"type":"object","properties":{` + repeat(100, `"x%d":{"type":"integer"}`) + `}}},"properties":{` +
			`"big":{"pattern":"^[\\pL\\pN]{660}$"},` + repeat(6, `"p%d":{"type":"string","pattern":"^[a-z]{995}$"}`) + `,` +
			repeat(rooms.MaxSubschemas-7-300, `"q%d":{"type":"string"}`) + `,` +
			repeat(150, `"r%d":{"$ref":"#/$defs/d"}`) + `,"deep":` + items(30, `{"type":"string"}`) + `}}`
		start := time.Now()
		want(t, a.do("POST", path, `{"version":10,"schema":`+schema+`}`), http.StatusCreated)
		if d := time.Since(start); d > 10*time.Second { // a guard: it takes a fraction of a second
			t.Errorf("created after %v", d)
		}
		want(t, a.do("POST", "/v1/rooms/orders/messages", `{"eventType":"order.created","eventTypeVersion":10,"payload":{"q1":"x","r1":{"x1":1},"deep":[]}}`), http.StatusAccepted)
	})
}

func TestPayloadLimitsOverHTTP(t *testing.T) {
	t.Parallel()
	a := newTestAPIConfig(t, store.SQLite, bigBodies())
	a.seed(t)
	// Every item is checked against 999 alternatives: a few hundred items fit
	// the validation budget, a few thousand do not.
	schema := `{"items":{"anyOf":[` + repeat(rooms.MaxChecksPerValue-2, `{"type":"string"}`) + `]}}`
	want(t, a.do("POST", "/v1/rooms/orders/event-types/order.created/versions", `{"version":3,"schema":`+schema+`}`), http.StatusCreated)
	publish := func(payload string) string {
		return `{"eventType":"order.created","eventTypeVersion":3,"payload":` + payload + `}`
	}
	want(t, a.do("POST", "/v1/rooms/orders/messages", publish(`[`+repeat(100, `"s"`)+`]`)), http.StatusAccepted)
	refusedFast(t, a, "POST", "/v1/rooms/orders/messages", publish(`[`+repeat(50_000, `0`)+`]`), "payload", "/payload", "too large to check")
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
			requestListLimits(t, newTestAPIConfig(t, d, bigBodies()))
		})
	}
}

func requestListLimits(t *testing.T, a *testAPI) {
	a.seed(t)
	sub := func(filters string) string { return `{"type":"PULL","eventTypes":[` + filters + `]}` }
	versions := func(n int) string { return `{"eventType":"order.created","versions":[` + repeat(n, `%d`) + `]}` }
	const subs = "/v1/rooms/orders/subscriptions"

	refusedFast(t, a, "POST", subs, sub(versions(100_000)), "eventTypes[0].versions", "", "at most 100 versions")
	refusedFast(t, a, "POST", subs, sub(versions(101)), "eventTypes[0].versions", "", "at most 100 versions")
	refusedFast(t, a, "POST", subs, sub(repeat(11, `{"eventType":"t%d","versions":[`+repeat(100, `%d`)+`]}`)), "eventTypes", "", "at most 1000 versions in all")
	refusedFast(t, a, "POST", subs, sub(repeat(101, `{"eventType":"t%d"}`)), "eventTypes", "", "at most 100 event types")

	// 100 versions, all checked in one lookup: 0 to 99, of which 0 does
	// not exist; then 1 to 100.
	for v := 3; v <= 100; v++ {
		want(t, a.do("POST", "/v1/rooms/orders/event-types/order.created/versions", fmt.Sprintf(`{"version":%d,"schema":{}}`, v)), http.StatusCreated)
	}
	refusedFast(t, a, "POST", subs, sub(versions(100)), "eventTypes[0].versions[0]", "", "version 0 of event type")
	want(t, a.do("POST", subs, sub(`{"eventType":"order.created","versions":[`+repeat(99, `%d`)[2:]+`,99,100]}`)), http.StatusCreated)

	attrs := `{` + repeat(50_000, `"a%d":"x"`) + `}`
	r := a.do("POST", "/v1/rooms/orders/messages", `{"eventType":"order.created","payload":{"orderId":"1"},"attributes":`+attrs+`}`)
	want(t, r, http.StatusUnprocessableEntity)
	var p api.Problem
	if err := json.Unmarshal(r.Body, &p); err != nil || len(p.Errors) != 1 || p.Errors[0].Field != "attributes" {
		t.Errorf("50000 attributes: want one problem naming attributes: %.500s", r.Body)
	}
	msg := `{"eventType":"order.created","payload":{"orderId":"1"}}`
	refusedFast(t, a, "POST", "/v1/rooms/orders/messages:batch", `{"messages":[`+strings.Repeat(msg+",", 100)+msg+`]}`, "messages", "", "1 to 100 messages")
}
