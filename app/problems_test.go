package app_test

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/roomhub/messaging-api/api"
	"github.com/roomhub/messaging-api/api/apitest"
	"github.com/roomhub/messaging-api/app"
	"github.com/roomhub/messaging-api/app/apptest"
)

// TestProblemKindsDocumented: openapi.yaml (the Problem schema's code: its
// enum and the table in its description) and docs/api-guide.md ("Problem
// types") list exactly the kinds of api.Kinds, with their status, and the
// guide with their meaning and what to do.
func TestProblemKindsDocumented(t *testing.T) {
	t.Parallel()
	doc, err := openapi3.NewLoader().LoadFromFile(filepath.Join(apptest.RepoRoot(), "openapi.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	problem := doc.Components.Schemas["Problem"].Value
	code := problem.Properties["code"].Value
	var codes []string
	for _, k := range api.Kinds {
		codes = append(codes, k.Code)
	}
	var enum []string
	for _, v := range code.Enum {
		enum = append(enum, v.(string))
	}
	if !slices.Equal(enum, codes) {
		t.Errorf("openapi.yaml's Problem.code enum is\n%v\nbut api.Kinds has\n%v", enum, codes)
	}
	if !slices.Contains(problem.Required, "code") || !regexp.MustCompile(problem.Properties["type"].Value.Pattern).MatchString(api.ErrValidation.Type()) {
		t.Error("openapi.yaml's Problem: code is not required, or type's pattern refuses the kinds' types")
	}
	// The tables: "| `code` | status | ..." rows, in the table's order.
	rows := func(text string) [][]string {
		var out [][]string
		for line := range strings.SplitSeq(text, "\n") {
			cells := strings.Split(strings.TrimSpace(line), " | ")
			if len(cells) >= 3 && strings.HasPrefix(cells[0], "| `") {
				cells[0] = strings.Trim(strings.TrimPrefix(cells[0], "| "), "`")
				cells[len(cells)-1] = strings.TrimSuffix(cells[len(cells)-1], " |")
				out = append(out, cells)
			}
		}
		return out
	}
	check := func(where string, rows [][]string, withDocs bool) {
		t.Helper()
		if len(rows) != len(api.Kinds) {
			t.Errorf("%s lists %d kinds, api.Kinds %d", where, len(rows), len(api.Kinds))
		}
		for i, k := range api.Kinds {
			if i >= len(rows) {
				break
			}
			r := rows[i]
			want := []string{k.Code, strconv.Itoa(k.Status)}
			if withDocs {
				want = append(want, k.Meaning, k.Action)
			}
			if !slices.Equal(r[:min(len(r), len(want))], want) {
				t.Errorf("%s, row %d:\n%q\nwant\n%q", where, i+1, r, want)
			}
		}
	}
	check("openapi.yaml's Problem.code", rows(code.Description), false)
	guide, err := os.ReadFile(filepath.Join(apptest.RepoRoot(), "docs", "api-guide.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(guide), "### Problem types")
	section, _, _ = strings.Cut(section, "\n**")
	check(`docs/api-guide.md's "Problem types"`, rows(section), true)
}

// TestProblemKindsOverHTTP: a request that meets each kind of problem (but
// internal_error, which api's tests cover) is answered with that kind; the
// harness checks each answer against openapi.yaml and api.Kinds besides.
func TestProblemKindsOverHTTP(t *testing.T) {
	t.Parallel()
	f := newAuthFixture(t, "sqlite")
	slow := f.key(t, map[string]any{"name": "slow publisher", "role": "publisher", "publishRateLimit": 0.001, "publishBurst": 1,
		"rooms": []any{map[string]any{"roomId": f.roomA}}})
	publish := `{"eventType":"order.created","payload":{"orderId":"o-1"}}`
	roomA, subA := "/v1/rooms/"+f.roomA, "/v1/rooms/"+f.roomA+"/subscriptions/"+f.subA
	cases := []struct {
		kind *api.Kind
		call func() apptest.Response
	}{
		{api.ErrMalformed, func() apptest.Response { return f.as("a", "POST", "/v1/rooms", `{"identifier":`) }},
		{api.ErrUnauthorized, func() apptest.Response { return f.as("", "GET", "/v1/rooms", nil) }},
		{api.ErrForbidden, func() apptest.Response { return f.as("p", "DELETE", roomA, nil) }},
		{api.ErrNotFound, func() apptest.Response { return f.as("a", "GET", "/v1/rooms/nope", nil) }},
		{api.ErrMethodNotAllowed, func() apptest.Response { return f.as("a", "PUT", roomA, `{}`) }},
		{api.ErrAlreadyExists, func() apptest.Response {
			return f.as("a", "POST", roomA+"/event-types", map[string]any{"identifier": "order.created"})
		}},
		{api.ErrInUse, func() apptest.Response { return f.as("a", "DELETE", roomA, nil) }},
		{api.ErrInvalidState, func() apptest.Response { return f.as("a", "POST", subA+":approve", nil) }},
		{api.ErrIdempotencyKeyReused, func() apptest.Response {
			key := map[string]string{"Authorization": "Bearer " + f.keys['a'], "Idempotency-Key": "k-1"}
			apptest.Want(t, f.DoHeaders("POST", roomA+"/messages", publish, key), http.StatusAccepted)
			return f.DoHeaders("POST", roomA+"/messages", `{"eventType":"order.created","payload":{"orderId":"o-2"}}`, key)
		}},
		{api.ErrRateLimited, func() apptest.Response {
			key := map[string]string{"Authorization": "Bearer " + slow}
			apptest.Want(t, f.DoHeaders("POST", roomA+"/messages", publish, key), http.StatusAccepted)
			return f.DoHeaders("POST", roomA+"/messages", publish, key)
		}},
		{api.ErrPayloadTooLarge, func() apptest.Response {
			return f.as("a", "POST", "/v1/rooms", `{"identifier":"`+strings.Repeat("a", 70<<10)+`"}`)
		}},
		{api.ErrUnsupportedMediaType, func() apptest.Response {
			return f.Send("POST", "/v1/rooms", []byte(`{}`), map[string]string{"Authorization": "Bearer " + f.keys['a'], "Content-Type": "text/plain"})
		}},
		{api.ErrValidation, func() apptest.Response { return f.as("a", "POST", "/v1/rooms", map[string]any{"identifier": "bad id"}) }},
		{api.ErrHeaderTooLarge, func() apptest.Response {
			return f.Send("GET", "/v1/rooms", nil, map[string]string{"X-Pad": strings.Repeat("a", 100<<10)})
		}},
		{api.ErrUnavailable, func() apptest.Response {
			f.Queues.SetDown(true)
			defer f.Queues.SetDown(false)
			return f.as("a", "POST", roomA+"/subscriptions", map[string]any{"type": "PULL", "eventTypes": []any{map[string]any{"eventType": "order.created"}}})
		}},
	}
	// In order: rate_limited spends the slow key's one event first.
	for _, c := range cases {
		if err := checkKind(c.call(), c.kind); err != "" {
			t.Errorf("%s: %s", c.kind.Code, err)
		}
	}

	limited := apptest.NewConfig(t, "sqlite", func() app.Config {
		cfg := apptest.Config()
		cfg.Limits.MaxRoomSubscriptions = 1
		return cfg
	}())
	limited.Seed(t)
	sub := map[string]any{"type": "PULL", "eventTypes": []any{map[string]any{"eventType": "order.created"}}}
	apptest.Want(t, limited.Do("POST", "/v1/rooms/orders/subscriptions", sub), http.StatusCreated)
	if err := checkKind(limited.Do("POST", "/v1/rooms/orders/subscriptions", sub), api.ErrLimitReached); err != "" {
		t.Errorf("limit_reached: %s", err)
	}
}

// checkKind says how r is not a problem of kind k ("" when it is one).
func checkKind(r apptest.Response, k *api.Kind) string {
	if err := apitest.CheckProblem(r.Status, r.Body); err != nil {
		return err.Error()
	}
	var p api.Problem
	if err := json.Unmarshal(r.Body, &p); err != nil || p.Code != k.Code {
		return "not that kind: " + string(r.Body)
	}
	return ""
}
