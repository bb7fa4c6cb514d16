package main

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/roomhub/messaging-api/cmd/internal/jsonapi"
)

// apiClient calls the service's HTTP API.
type apiClient struct {
	base string
	hc   *http.Client
}

func newAPIClient(base string, conns int) *apiClient {
	return &apiClient{base: base, hc: &http.Client{
		Timeout: 60 * time.Second,
		Transport: &http.Transport{
			MaxIdleConns: conns, MaxIdleConnsPerHost: conns, IdleConnTimeout: time.Minute,
			DisableCompression: true,
		},
	}}
}

// call sends body (bytes as they are, anything else as JSON) and decodes
// the answer into out when it is not nil; another status than want is an error.
func (c *apiClient) call(ctx context.Context, method, path string, body any, want int, out any) error {
	return jsonapi.Call(ctx, c.hc, method, c.base+path, body, want, out)
}

// orderSchema is the JSON Schema of the benchmark's event type: what a
// publisher validates against in the README's example, plus the fields the
// benchmark adds.
var orderSchema = map[string]any{
	"type":     "object",
	"required": []string{"orderId", "total"},
	"properties": map[string]any{
		"orderId":  map[string]any{"type": "string"},
		"total":    map[string]any{"type": "number", "minimum": 0},
		"currency": map[string]any{"type": "string"},
		"items":    map[string]any{"type": "array"},
		"t":        map[string]any{"type": "integer"},
	},
}

// Event types of the benchmark's rooms.
const (
	eventFast = "order.created"
	eventSlow = "order.audited" // isolation: routed to the hanging endpoint
)

// setupRoom creates a room with the benchmark's event types (each with
// version 1) and returns its id. extra adds room fields.
func (c *apiClient) setupRoom(ctx context.Context, ident string, extra map[string]any, eventTypes ...string) (string, error) {
	body := map[string]any{"identifier": ident, "managerIdentifier": "msgbench"}
	for k, v := range extra {
		body[k] = v
	}
	var room struct {
		ID string `json:"id"`
	}
	if err := c.call(ctx, "POST", "/v1/rooms", body, http.StatusCreated, &room); err != nil {
		return "", err
	}
	if len(eventTypes) == 0 {
		eventTypes = []string{eventFast}
	}
	for _, et := range eventTypes {
		if err := c.call(ctx, "POST", "/v1/rooms/"+ident+"/event-types", map[string]any{"identifier": et}, http.StatusCreated, nil); err != nil {
			return "", err
		}
		if err := c.call(ctx, "POST", "/v1/rooms/"+ident+"/event-types/"+et+"/versions",
			map[string]any{"version": 1, "schema": orderSchema}, http.StatusCreated, nil); err != nil {
			return "", err
		}
	}
	return room.ID, nil
}

type subscription struct {
	ID          string `json:"id"`
	Destination string `json:"destination"`
}

// subscribe creates a subscription of room to eventType; extra adds fields.
func (c *apiClient) subscribe(ctx context.Context, room, kind, eventType string, extra map[string]any) (subscription, error) {
	body := map[string]any{"type": kind, "eventTypes": []map[string]any{{"eventType": eventType}}}
	for k, v := range extra {
		body[k] = v
	}
	var s subscription
	err := c.call(ctx, "POST", "/v1/rooms/"+room+"/subscriptions", body, http.StatusCreated, &s)
	return s, err
}

// appendEvent appends one publish input whose payload is appendPayload's.
func appendEvent(b []byte, eventType string, seq int, t int64) []byte {
	b = append(b, `{"eventType":"`...)
	b = append(b, eventType...)
	b = append(b, `","payload":`...)
	b = appendPayload(b, seq, t)
	return append(b, '}')
}

// appendPayload appends a ~150-byte order; "t" is the intended publish time
// (an offset from the sink's t0), from which the sink computes latency.
func appendPayload(b []byte, seq int, t int64) []byte {
	b = append(b, `{"orderId":"o-`...)
	b = strconv.AppendInt(b, int64(seq), 10)
	b = append(b, `","total":`...)
	b = strconv.AppendInt(b, int64(seq%1000), 10)
	b = append(b, `.5,"currency":"EUR","items":[{"sku":"sku-1","qty":1},{"sku":"sku-2","qty":2}],"t":`...)
	b = strconv.AppendInt(b, t, 10)
	return append(b, '}')
}

// batchBody is a messages:batch request of n events; eventType picks each
// event's type from its sequence number.
func batchBody(seq0, n int, t int64, eventType func(seq int) string) []byte {
	b := make([]byte, 0, n*220+16)
	b = append(b, `{"messages":[`...)
	for i := range n {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendEvent(b, eventType(seq0+i), seq0+i, t)
	}
	return append(b, "]}"...)
}

func fastOnly(int) string { return eventFast }

// loadResult is what a publishing loop achieved.
type loadResult struct {
	accepted int           // events answered 202
	requests int           // requests answered 202
	errors   int           // requests answered otherwise, or failed
	firstErr error         // the first of those
	elapsed  time.Duration // from the first request to the last answer
	started  time.Time
}

// load runs workers that each call req(ctx, n) for n = 0, 1, 2, ... until
// until passes or maxReq requests were made (0: no bound). req returns how
// many events the request carried. Failed requests are counted, not retried.
func load(ctx context.Context, workers int, until time.Time, maxReq int, req func(ctx context.Context, n int) (int, error)) loadResult {
	var (
		next                     atomic.Int64
		accepted, okReqs, failed atomic.Int64
		mu                       sync.Mutex
		firstErr                 error
		wg                       sync.WaitGroup
	)
	start := time.Now()
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil && (until.IsZero() || time.Now().Before(until)) {
				n := int(next.Add(1) - 1)
				if maxReq > 0 && n >= maxReq {
					return
				}
				events, err := req(ctx, n)
				if err != nil {
					failed.Add(1)
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					continue
				}
				okReqs.Add(1)
				accepted.Add(int64(events))
			}
		})
	}
	wg.Wait()
	return loadResult{accepted: int(accepted.Load()), requests: int(okReqs.Load()), errors: int(failed.Load()),
		firstErr: firstErr, elapsed: time.Since(start), started: start}
}

// publishBatches publishes total events to room in requests of up to 100
// with workers concurrent requests.
func (b *bench) publishBatches(ctx context.Context, c *apiClient, room string, total int, eventType func(int) string) (loadResult, error) {
	const per = 100
	reqs := (total + per - 1) / per
	res := load(ctx, b.cfg.concurrency, time.Time{}, reqs, func(ctx context.Context, n int) (int, error) {
		k := min(per, total-n*per)
		body := batchBody(n*per, k, b.sink.since(), eventType)
		return k, c.call(ctx, "POST", "/v1/rooms/"+room+"/messages:batch", body, http.StatusAccepted, nil)
	})
	if res.accepted != total {
		return res, fmt.Errorf("published %d of %d events to %s (%d failed requests; first: %w)", res.accepted, total, room, res.errors, res.firstErr)
	}
	return res, nil
}
