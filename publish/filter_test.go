package publish_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/roomhub/messaging-api/api"
	"github.com/roomhub/messaging-api/app/apptest"
	"github.com/roomhub/messaging-api/publish"
	"github.com/roomhub/messaging-api/subscriptions"
)

// TestAttributeFilterRouting publishes events with attributes to a room
// whose subscriptions filter on them (and one that does not), in single
// publishes and a batch, and checks which subscriptions each event reached.
func TestAttributeFilterRouting(t *testing.T) {
	t.Parallel()
	apptest.ForEachDialect(t, func(t *testing.T, a *apptest.API) {
		a.Seed(t)
		filters := map[string]string{
			"all":      `null`,
			"eu-or-us": `{"region":["eu","us"]}`,
			"urgent":   `{"priority":[{"numeric":[">=",5]}],"source":[{"prefix":"web-"}]}`,
			"no-trace": `{"traceId":[{"exists":false}]}`,
			"paying":   `{"tier":[{"anything-but":["free"]}]}`,
			"range":    `{"priority":[{"numeric":[">",0,"<=",2]},"none"]}`,
		}
		names := map[string]string{}
		for name, filter := range filters {
			r := a.Do("POST", "/v1/rooms/orders/subscriptions",
				`{"type":"PUSH","pushUrl":"http://127.0.0.1:9/`+name+`","eventTypes":[{"eventType":"order.created"}],"attributeFilter":`+filter+`}`)
			apptest.Want(t, r, http.StatusCreated)
			s := apptest.Decode[subscriptions.Response](t, r)
			names[s.ID] = name
			if string(s.AttributeFilter) != filter {
				t.Errorf("%s: attributeFilter answered as %s, want %s", name, s.AttributeFilter, filter)
			}
		}

		cases := []struct {
			attrs map[string]string
			want  []string
		}{
			{nil, []string{"all", "no-trace"}},
			{map[string]string{"region": "eu"}, []string{"all", "eu-or-us", "no-trace"}},
			{map[string]string{"region": "EU", "traceId": "t"}, []string{"all"}},
			{map[string]string{"priority": "7", "source": "web-shop"}, []string{"all", "no-trace", "urgent"}},
			{map[string]string{"priority": "high", "source": "web-shop"}, []string{"all", "no-trace"}},
			{map[string]string{"priority": "1.5", "tier": "free"}, []string{"all", "no-trace", "range"}},
			{map[string]string{"priority": "none", "tier": "gold", "traceId": ""}, []string{"all", "paying", "range"}},
		}
		routed := func(t *testing.T, eventID string) []string {
			t.Helper()
			r := a.Do("GET", "/v1/rooms/orders/messages/"+eventID, nil)
			apptest.Want(t, r, http.StatusOK)
			var got []string
			for _, d := range apptest.Decode[publish.EventResponse](t, r).Deliveries {
				got = append(got, names[d.SubscriptionID])
			}
			slices.Sort(got)
			return got
		}
		var batch []any
		for i, tc := range cases {
			msg := map[string]any{"eventType": "order.created", "payload": map[string]any{"orderId": "o-1"}, "attributes": tc.attrs}
			batch = append(batch, msg)
			r := a.Do("POST", "/v1/rooms/orders/messages", msg)
			apptest.Want(t, r, http.StatusAccepted)
			res := apptest.Decode[publish.PublishResponse](t, r)
			if got := routed(t, res.EventID); !slices.Equal(got, tc.want) || res.Destinations != len(tc.want) {
				t.Errorf("case %d %v: reached %v (destinations %d), want %v", i, tc.attrs, got, res.Destinations, tc.want)
			}
		}
		r := a.Do("POST", "/v1/rooms/orders/messages:batch", map[string]any{"messages": batch})
		apptest.Want(t, r, http.StatusAccepted)
		for i, res := range apptest.Decode[api.List[publish.PublishResponse]](t, r).Items {
			if got := routed(t, res.EventID); !slices.Equal(got, cases[i].want) {
				t.Errorf("batch message %d %v: reached %v, want %v", i, cases[i].attrs, got, cases[i].want)
			}
		}

		// A change of filter applies to the next publish, and null removes it.
		var eu string
		for id, name := range names {
			if name == "eu-or-us" {
				eu = id
			}
		}
		r = a.Do("PATCH", "/v1/rooms/orders/subscriptions/"+eu, map[string]any{"attributeFilter": map[string]any{"region": []any{"asia"}}})
		apptest.Want(t, r, http.StatusOK)
		if f := string(apptest.Decode[subscriptions.Response](t, r).AttributeFilter); f != `{"region":["asia"]}` {
			t.Errorf("patched filter %s", f)
		}
		res := publishWith(t, a, map[string]string{"region": "eu"})
		if got := routed(t, res.EventID); slices.Contains(got, "eu-or-us") {
			t.Errorf("after the PATCH an eu event still reached eu-or-us: %v", got)
		}
		apptest.Want(t, a.Do("PATCH", "/v1/rooms/orders/subscriptions/"+eu, `{"attributeFilter":null}`), http.StatusOK)
		res = publishWith(t, a, map[string]string{"region": "eu", "traceId": "t"})
		if got := routed(t, res.EventID); !slices.Equal(got, []string{"all", "eu-or-us"}) {
			t.Errorf("with the filter removed: reached %v", got)
		}
	})
}

// TestAttributeFilterValidation: a bad filter is a 422 naming
// attributeFilter with the pointer of the bad part, on create and PATCH,
// and nothing is stored; a filter answers alike when read back.
func TestAttributeFilterValidation(t *testing.T) {
	t.Parallel()
	apptest.ForEachDialect(t, func(t *testing.T, a *apptest.API) {
		a.Seed(t)
		create := func(filter string) apptest.Response {
			t.Helper()
			return a.Do("POST", "/v1/rooms/orders/subscriptions", `{"type":"PULL","eventTypes":[{"eventType":"order.created"}],"attributeFilter":`+filter+`}`)
		}
		for filter, pointer := range map[string]string{
			`{"priority":[{"numeric":[">=","5"]}]}`:                         "/attributeFilter/priority/0/numeric/1",
			`{"a":["x"],"b":["x"],"c":["x"],"d":["x"],"e":["x"],"f":["x"]}`: "/attributeFilter",
			`{"region":[{"prefix":""}]}`:                                    "/attributeFilter/region/0/prefix",
			`{"region":"eu"}`:                                               "/attributeFilter/region",
			`{"region":["eu",{"like":"e%"}]}`:                               "/attributeFilter/region/1",
			`["eu"]`:                                                        "/attributeFilter",
			`{"region":["` + strings.Repeat("x", 1025) + `"]}`:              "/attributeFilter/region/0",
		} {
			r := create(filter)
			apptest.WantField(t, r, "attributeFilter")
			if !strings.Contains(string(r.Body), `"pointer":"`+pointer+`"`) {
				t.Errorf("%.60s: the problem does not point at %s: %s", filter, pointer, r.Body)
			}
		}
		r := a.Do("GET", "/v1/rooms/orders/subscriptions", nil)
		apptest.Want(t, r, http.StatusOK)
		if !strings.Contains(string(r.Body), `"items":[]`) {
			t.Fatalf("a refused subscription was stored: %s", r.Body)
		}

		r = create(`{ "tier" : [ {"anything-but": "free"} ], "priority": [{"numeric": ["<", 1e2]}] }`)
		apptest.Want(t, r, http.StatusCreated)
		s := apptest.Decode[subscriptions.Response](t, r)
		const canonical = `{"priority":[{"numeric":["<",100]}],"tier":[{"anything-but":["free"]}]}`
		if string(s.AttributeFilter) != canonical {
			t.Errorf("filter answered as %s, want %s", s.AttributeFilter, canonical)
		}
		r = a.Do("GET", "/v1/rooms/orders/subscriptions/"+s.ID, nil)
		apptest.Want(t, r, http.StatusOK)
		if got := string(apptest.Decode[subscriptions.Response](t, r).AttributeFilter); got != canonical {
			t.Errorf("filter read back as %s, want %s", got, canonical)
		}
		r = a.Do("PATCH", "/v1/rooms/orders/subscriptions/"+s.ID, `{"attributeFilter":{"tier":[{"numeric":["<",5,">",9]}]}}`)
		apptest.WantField(t, r, "attributeFilter")
		r = a.Do("GET", "/v1/rooms/orders/subscriptions/"+s.ID, nil)
		if got := string(apptest.Decode[subscriptions.Response](t, r).AttributeFilter); got != canonical {
			t.Errorf("a refused PATCH changed the filter to %s", got)
		}
		r = create(`{}`)
		apptest.Want(t, r, http.StatusCreated)
		if f := r.JSON(t)["attributeFilter"]; f != nil {
			t.Errorf("{} answered as %v, want null (no filter)", f)
		}
	})
}

// publishWith publishes one order.created with attrs.
func publishWith(t *testing.T, a *apptest.API, attrs map[string]string) publish.PublishResponse {
	t.Helper()
	raw, err := json.Marshal(map[string]any{"eventType": "order.created", "payload": map[string]any{"orderId": "o-1"}, "attributes": attrs})
	if err != nil {
		t.Fatal(err)
	}
	r := a.Do("POST", "/v1/rooms/orders/messages", string(raw))
	apptest.Want(t, r, http.StatusAccepted)
	return apptest.Decode[publish.PublishResponse](t, r)
}
