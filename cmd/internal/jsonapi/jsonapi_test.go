package jsonapi

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestCall(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/fail" {
			http.Error(w, "no such thing", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"echo":` + string(body) + `,"type":"` + r.Header.Get("Content-Type") + `"}`))
	}))
	defer srv.Close()
	ctx := context.Background()

	var out struct {
		Echo map[string]int `json:"echo"`
		Type string         `json:"type"`
	}
	if err := Call(ctx, srv.Client(), http.MethodPost, srv.URL+"/x", map[string]int{"a": 1}, http.StatusOK, &out); err != nil {
		t.Fatal(err)
	}
	if out.Echo["a"] != 1 || out.Type != "application/json" {
		t.Errorf("answer %+v", out)
	}
	if err := Call(ctx, srv.Client(), http.MethodPost, srv.URL+"/x", []byte(`{"b":2}`), http.StatusOK, &out); err != nil || out.Echo["b"] != 2 {
		t.Errorf("raw body: %v %+v", err, out)
	}
	err := Call(ctx, srv.Client(), http.MethodGet, srv.URL+"/fail", nil, http.StatusOK, nil)
	if err == nil || !strings.Contains(err.Error(), "404, want 200: no such thing") {
		t.Errorf("a wrong status: %v", err)
	}
}
