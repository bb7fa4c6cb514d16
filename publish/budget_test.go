package publish_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/roomhub/messaging-api/api"
	"github.com/roomhub/messaging-api/publish"
)

// costlySchema is within every schema limit, and checking one string
// against it costs about a millisecond: each item is tried against 30×30
// alternatives.
var costlySchema = `{"type":"array","items":{"anyOf":[` +
	strings.TrimSuffix(strings.Repeat(`{"anyOf":[`+strings.TrimSuffix(strings.Repeat(`{"type":"string","minLength":2},`, 30), ",")+`]},`, 30), ",") + `]}}`

func batchOf(n int, version, payload string) string {
	msg := `{"eventType":"order.created","eventTypeVersion":` + version + `,"payload":` + payload + `}`
	return `{"messages":[` + strings.TrimSuffix(strings.Repeat(msg+",", n), ",") + `]}`
}

func postBatch(ctx context.Context, h publishHarness, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/rooms/orders/messages:batch", strings.NewReader(body))
	req.Header.Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
	rec := httptest.NewRecorder()
	h.e.ServeHTTP(rec, req)
	return rec
}

func TestBatchValidationBudget(t *testing.T) {
	t.Parallel()
	h := newPublishHarness(map[int]string{3: costlySchema})
	// Estimated at about 0.4 s of CPU each, within the per-payload limit.
	ones := `[` + strings.TrimSuffix(strings.Repeat(`1,`, 400), ",") + `]`

	t.Run("one costly payload", func(t *testing.T) {
		// Checked (about a quarter of a second): each 1 is not a string.
		if rec := postBatch(context.Background(), h, batchOf(1, "3", ones)); rec.Code != http.StatusUnprocessableEntity ||
			!strings.Contains(rec.Body.String(), `"/messages/0/payload/0"`) {
			t.Fatalf("%d %.500s; want 422 with the payload's violations", rec.Code, rec.Body)
		}
	})
	t.Run("100 costly payloads", func(t *testing.T) {
		start := time.Now()
		rec := postBatch(context.Background(), h, batchOf(publish.MaxBatch, "3", ones))
		if d := time.Since(start); d > 2*time.Second { // a guard: checking them all takes tens of seconds
			t.Errorf("answered after %v", d)
		}
		if rec.Code != http.StatusUnprocessableEntity {
			t.Fatalf("%d %.500s, want 422", rec.Code, rec.Body)
		}
		var p api.Problem
		if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
			t.Fatal(err)
		}
		if len(p.Errors) != 1 || p.Errors[0].Field != "messages[1].payload" || p.Errors[0].Pointer != "/messages/1/payload" ||
			!strings.Contains(p.Errors[0].Message, "more than the 0.5 s one request may take") {
			t.Fatalf("errors %+v, want one naming messages[1].payload and the budget", p.Errors)
		}
	})
	t.Run("100 small payloads", func(t *testing.T) {
		rec := postBatch(context.Background(), h, batchOf(publish.MaxBatch, "3", `["ab","cd","ef"]`))
		if rec.Code != http.StatusAccepted {
			t.Fatalf("%d %.500s, want 202", rec.Code, rec.Body)
		}
	})
	t.Run("client gone", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		stored := len(h.store.events)
		if rec := postBatch(ctx, h, batchOf(publish.MaxBatch, "3", ones)); rec.Code == http.StatusAccepted || len(h.store.events) != stored {
			t.Fatalf("%d, %d events stored; want nothing stored", rec.Code, len(h.store.events)-stored)
		}
	})
}
