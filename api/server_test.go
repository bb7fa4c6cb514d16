package api

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
)

// serve runs h on a fresh echo with the API's error handler and answers req.
func serve(t *testing.T, req *http.Request, h echo.HandlerFunc, mw ...echo.MiddlewareFunc) *httptest.ResponseRecorder {
	t.Helper()
	e := echo.New()
	e.HTTPErrorHandler = ErrorHandler(slog.New(slog.NewTextHandler(io.Discard, nil)))
	e.JSONSerializer = JSONSerializer{}
	e.Use(mw...)
	e.Any("/x", h)
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, req)
	return rec
}

func problemOfRecorder(t *testing.T, rec *httptest.ResponseRecorder) Problem {
	t.Helper()
	if ct := rec.Header().Get(echo.HeaderContentType); ct != ProblemContentType {
		t.Fatalf("status %d with Content-Type %q: %s", rec.Code, ct, rec.Body)
	}
	var p Problem
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestDecodeContentType: a body must be declared JSON; an empty one needs no
// Content-Type.
func TestDecodeContentType(t *testing.T) {
	t.Parallel()
	cases := []struct {
		ct, body string
		optional bool
		want     int
	}{
		{"application/json", `{"a":1}`, false, http.StatusOK},
		{"application/json; charset=utf-8", `{"a":1}`, false, http.StatusOK},
		{"Application/JSON;charset=UTF-8", `{"a":1}`, false, http.StatusOK},
		{"application/merge-patch+json", `{"a":1}`, false, http.StatusOK},
		{"application/vnd.example+json; v=2", `{"a":1}`, false, http.StatusOK},
		{"", `{"a":1}`, false, http.StatusUnsupportedMediaType},
		{"text/plain", `{"a":1}`, false, http.StatusUnsupportedMediaType},
		{"application/x-www-form-urlencoded", `{"a":1}`, false, http.StatusUnsupportedMediaType},
		{"application/json; charset=latin1", `{"a":1}`, false, http.StatusUnsupportedMediaType},
		{"text/json+json", `{"a":1}`, false, http.StatusUnsupportedMediaType},
		{"application/json;;", `{"a":1}`, false, http.StatusUnsupportedMediaType},
		{"", ``, true, http.StatusOK},
		{"", "  \n", true, http.StatusOK},
		{"text/plain", ``, true, http.StatusOK},
		{"", ``, false, http.StatusBadRequest}, // required body: the decoder names it
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%q %q", tc.ct, tc.body), func(t *testing.T) {
			t.Parallel()
			req := httptest.NewRequest(http.MethodPost, "/x", strings.NewReader(tc.body))
			if tc.ct != "" {
				req.Header.Set(echo.HeaderContentType, tc.ct)
			}
			rec := serve(t, req, func(c echo.Context) error {
				var v struct {
					A int `json:"a"`
				}
				decode := Decode
				if tc.optional {
					decode = DecodeOptional
				}
				if err := decode(c, &v); err != nil {
					return err
				}
				return c.NoContent(http.StatusOK)
			})
			if rec.Code != tc.want {
				t.Fatalf("status %d, want %d: %s", rec.Code, tc.want, rec.Body)
			}
			if tc.want >= 400 {
				if p := problemOfRecorder(t, rec); p.Status != tc.want || p.Detail == "" {
					t.Errorf("problem %+v", p)
				}
			}
		})
	}
}

func TestLimitHeader(t *testing.T) {
	t.Parallel()
	ok := func(c echo.Context) error { return c.NoContent(http.StatusNoContent) }
	small := httptest.NewRequest(http.MethodGet, "/x", nil)
	small.Header.Set("X-Pad", strings.Repeat("a", 900))
	if rec := serve(t, small, ok, LimitHeader(1024)); rec.Code != http.StatusNoContent {
		t.Fatalf("a header under the limit: %d", rec.Code)
	}
	big := httptest.NewRequest(http.MethodGet, "/x", nil)
	big.Header.Set("X-Pad", strings.Repeat("a", 1000))
	rec := serve(t, big, ok, LimitHeader(1024))
	if rec.Code != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("a header over the limit: %d", rec.Code)
	}
	if p := problemOfRecorder(t, rec); p.Status != http.StatusRequestHeaderFieldsTooLarge || !strings.Contains(p.Detail, "1024") {
		t.Errorf("problem %+v", p)
	}
}

// TestInField: an error about one field keeps its cause's status and names
// the field.
func TestInField(t *testing.T) {
	t.Parallel()
	notFound := fmt.Errorf("event type %w", ErrNotFound)
	err := InField("messages[2].eventType", "/messages/2/eventType", notFound)
	p := toProblem(err)
	if p.Status != http.StatusNotFound || !strings.HasPrefix(p.Detail, "messages[2].eventType: ") ||
		len(p.Errors) != 1 || p.Errors[0].Field != "messages[2].eventType" || p.Errors[0].Pointer != "/messages/2/eventType" {
		t.Fatalf("problem %+v", p)
	}
	if InField("x", "", nil) != nil {
		t.Fatal("InField(nil) is not nil")
	}
	if p := toProblem(InField("x", "", fmt.Errorf("boom"))); p.Status != http.StatusInternalServerError || p.Errors != nil {
		t.Fatalf("a 500 must not name a field: %+v", p)
	}
}

// TestJSONSerializer: raw JSON is answered as it is, without HTML escapes.
func TestJSONSerializer(t *testing.T) {
	t.Parallel()
	payload := `{"html":"<b>&amp;</b>","sep":"` + "\u2028" + `","nul":"\u0000","e":"\u00e9"}`
	rec := serve(t, httptest.NewRequest(http.MethodGet, "/x", nil), func(c echo.Context) error {
		return c.JSON(http.StatusOK, map[string]json.RawMessage{"payload": json.RawMessage(payload)})
	})
	if want := `{"payload":` + payload + "}\n"; rec.Body.String() != want {
		t.Fatalf("got  %s\nwant %s", rec.Body, want)
	}
}

func TestDecodeCursorRefusesBytes(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{"\x00", "a\xffb", "\xc3"} {
		if _, err := DecodeCursor(EncodeCursor(raw)); err == nil {
			t.Errorf("cursor of %q accepted", raw)
		}
	}
	if got, err := DecodeCursor(EncodeCursor("order.created")); err != nil || got != "order.created" {
		t.Errorf("got %q, %v", got, err)
	}
}
