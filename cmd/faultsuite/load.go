package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// outcome is what the suite knows of one publish request.
type outcome uint8

const (
	outNone     outcome = iota // not answered yet
	outAccepted                // 202
	outRejected                // answered with another status
	outRefused                 // connection refused: the request never reached a process
	outUnknown                 // sent, no answer (the process died, or a timeout): it may or may not be published
)

// result is one publish request's outcome.
type result struct {
	out     outcome
	status  int
	eventID string
	api     int
	// retried: the first outcome was unknown, and this is the outcome of a
	// retry with the same Idempotency-Key and body; replayed: that retry was
	// answered Idempotent-Replayed (the first request had been published).
	retried, replayed bool
	at                time.Time // when the answer came
}

// publisher offers publishes at a fixed rate (open loop), round-robin over the
// API processes, each with a unique correlation id and Idempotency-Key.
type publisher struct {
	apis   []*service
	hc     *http.Client
	prefix string
	rate   float64
	max    int // bound on in-flight requests

	mu      sync.Mutex
	results []result
	skipped int // ticks dropped because max requests were in flight
	wg      sync.WaitGroup
}

func newPublisher(apis []*service, prefix string, rate float64, maxInFlight int) *publisher {
	return &publisher{
		apis: apis, prefix: prefix, rate: rate, max: maxInFlight,
		hc: &http.Client{
			// Bounds a request held by a database outage; such a request
			// counts as unknown.
			Timeout: 15 * time.Second,
			Transport: &http.Transport{
				MaxIdleConns: maxInFlight, MaxIdleConnsPerHost: maxInFlight, IdleConnTimeout: 30 * time.Second,
				DisableCompression: true,
			},
		},
	}
}

// run publishes until ctx is done, then waits for the answers in flight.
func (p *publisher) run(ctx context.Context) {
	sem := make(chan struct{}, p.max)
	interval := time.Duration(float64(time.Second) / p.rate)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			p.wg.Wait()
			return
		case <-t.C:
		}
		select {
		case sem <- struct{}{}:
		default:
			p.mu.Lock()
			p.skipped++
			p.mu.Unlock()
			continue
		}
		seq := p.newSeq()
		p.launch(seq%len(p.apis), seq, func() { <-sem })
	}
}

// newSeq reserves the next sequence number.
func (p *publisher) newSeq() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.results = append(p.results, result{})
	return len(p.results) - 1
}

// launch publishes seq to API api in the background; done runs after.
func (p *publisher) launch(api, seq int, done func()) {
	p.wg.Go(func() {
		defer done()
		// Not the load's ctx: a request in flight when the load stops gets its answer.
		r := p.publish(context.Background(), api, seq)
		p.mu.Lock()
		p.results[seq] = r
		p.mu.Unlock()
	})
}

// burst publishes n at once to API api, on top of the steady load, so that a
// kill finds requests in every stage of their handling.
func (p *publisher) burst(api, n int) {
	for range n {
		p.launch(api, p.newSeq(), func() {})
	}
}

// body is publish seq's request body; the same for a retry.
func (p *publisher) body(seq int) []byte {
	return []byte(`{"eventType":"` + eventType + `","correlationId":"` + p.prefix + strconv.Itoa(seq) +
		`","payload":{"seq":` + strconv.Itoa(seq) + `}}`)
}

func (p *publisher) publish(ctx context.Context, api, seq int) result {
	s := p.apis[api]
	s.inflight.Add(1)
	defer s.inflight.Add(-1)
	r := result{api: api}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.base+"/v1/rooms/"+roomName+"/messages", bytes.NewReader(p.body(seq)))
	if err != nil {
		r.out = outRejected
		return r
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", p.prefix+strconv.Itoa(seq))
	// net/http resends a request with an Idempotency-Key by itself when a
	// kept-alive connection breaks, and a resend to a killed process is
	// refused: the first try's fate would be reported as "refused". Without
	// GetBody it cannot resend, and the broken try is reported as unknown.
	req.GetBody = nil
	resp, err := p.hc.Do(req)
	r.at = time.Now()
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) {
			r.out = outRefused
		} else {
			r.out = outUnknown
		}
		return r
	}
	defer resp.Body.Close()
	r.status = resp.StatusCode
	if resp.StatusCode != http.StatusAccepted {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
		r.out = outRejected
		return r
	}
	var body struct {
		EventID string `json:"eventId"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&body); err != nil {
		// 202 was answered: the event is accepted even if the body broke off.
		r.out = outAccepted
		return r
	}
	r.out, r.eventID = outAccepted, body.EventID
	r.replayed = resp.Header.Get("Idempotent-Replayed") == "true"
	return r
}

// retryUnknown retries every publish whose outcome is unknown once, with the
// same Idempotency-Key and body, as a client would: the service must answer
// it without publishing a second event.
func (p *publisher) retryUnknown(ctx context.Context) (retried int) {
	p.mu.Lock()
	var seqs []int
	for seq, r := range p.results {
		if r.out == outUnknown {
			seqs = append(seqs, seq)
		}
	}
	p.mu.Unlock()
	for _, seq := range seqs {
		p.mu.Lock()
		api := (p.results[seq].api + 1) % len(p.apis)
		p.mu.Unlock()
		r := p.publish(ctx, api, seq)
		r.retried = true
		if r.out == outRefused {
			r.out = outUnknown
		}
		if r.out != outUnknown {
			retried++
		}
		p.mu.Lock()
		p.results[seq] = r
		p.mu.Unlock()
	}
	return retried
}

func (p *publisher) outcome(seq int) outcome {
	p.mu.Lock()
	defer p.mu.Unlock()
	if seq >= len(p.results) {
		return outNone
	}
	return p.results[seq].out
}

// snapshot copies the results.
func (p *publisher) snapshot() ([]result, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]result(nil), p.results...), p.skipped
}

// puller drains the PULL subscription over REST: pull (long poll), then ack
// what came, round-robin over the API processes, until stopped.
type puller struct {
	apis   []*service
	c      *apiClient
	sub    string
	prefix string
	got    *receipts
	errs   atomic.Int64
	acked  atomic.Int64
}

type pulled struct {
	Messages []struct {
		AckID         string `json:"ackId"`
		EventID       string `json:"eventId"`
		CorrelationID string `json:"correlationId"`
	} `json:"messages"`
}

func (p *puller) run(ctx context.Context) {
	path := "/v1/rooms/" + roomName + "/subscriptions/" + p.sub
	for i := 0; ctx.Err() == nil; i++ {
		base := p.apis[i%len(p.apis)].base
		var res pulled
		if err := p.c.call(ctx, base, http.MethodPost, path+"/pull", map[string]any{"maxMessages": 100, "waitMs": 1000}, http.StatusOK, &res); err != nil {
			p.errs.Add(1)
			_ = sleep(ctx, 200*time.Millisecond)
			continue
		}
		if len(res.Messages) == 0 {
			continue
		}
		ids := make([]string, 0, len(res.Messages))
		for _, m := range res.Messages {
			p.got.add(p.prefix, m.CorrelationID, m.EventID)
			ids = append(ids, m.AckID)
		}
		// An ack that fails leaves the lease to expire: the message comes
		// again (a duplicate), never goes missing.
		if err := p.c.call(ctx, base, http.MethodPost, path+"/ack", map[string]any{"ackIds": ids}, http.StatusOK, nil); err != nil {
			p.errs.Add(1)
			continue
		}
		p.acked.Add(int64(len(ids)))
	}
}

// describe names an outcome for the report.
func (o outcome) String() string {
	switch o {
	case outAccepted:
		return "accepted"
	case outRejected:
		return "rejected"
	case outRefused:
		return "refused"
	case outUnknown:
		return "unknown"
	case outNone:
		return "none"
	}
	return fmt.Sprintf("outcome(%d)", uint8(o))
}
