package push

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name   string
		value  string
		want   time.Duration
		wantOK bool
	}{
		{"seconds", "120", 120 * time.Second, true},
		{"seconds with spaces", "  7 ", 7 * time.Second, true},
		{"zero seconds", "0", 0, true},
		{"seconds capped at a year", "99999999999", 365 * 24 * time.Hour, true},
		{"HTTP date (IMF-fixdate)", now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second, true},
		{"HTTP date (RFC 850)", now.Add(time.Hour).Format(time.RFC850), time.Hour, true},
		{"HTTP date (asctime)", now.Add(30 * time.Second).Format(time.ANSIC), 30 * time.Second, true},
		{"HTTP date in the past", now.Add(-time.Hour).Format(http.TimeFormat), 0, true},
		{"HTTP date now", now.Format(http.TimeFormat), 0, true},
		{"empty", "", 0, false},
		{"blank", "   ", 0, false},
		{"garbage", "soon", 0, false},
		{"negative", "-5", 0, false},
		{"fraction", "1.5", 0, false},
		{"date in another format", now.Format(time.RFC3339), 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, ok := ParseRetryAfter(tt.value, now)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("ParseRetryAfter(%q) = %v, %v; want %v, %v", tt.value, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

// receiver is a webhook target that counts requests.
type receiver struct {
	*httptest.Server
	hits atomic.Int64
}

func newReceiver(t *testing.T, h http.HandlerFunc) *receiver {
	t.Helper()
	r := &receiver{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.hits.Add(1)
		h(w, req)
	}))
	t.Cleanup(r.Close)
	return r
}

// postTo runs post against url with a client like the dispatcher's.
func postTo(t *testing.T, url string, timeout time.Duration, maxBody int64, now time.Time) Outcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client := NewHTTPClient(timeout, loopbackAllowed())
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("Webhook-Id", "evt-1")
	return post(ctx, client, Request{URL: url, Body: []byte(`{"n":1}`), Headers: h}, maxBody, func() time.Time { return now })
}

func TestPostClassifiesStatus(t *testing.T) {
	t.Parallel()
	tests := []struct {
		status int
		want   Result
	}{
		{200, Delivered},
		{201, Delivered},
		{202, Delivered},
		{204, Delivered},
		{299, Delivered},
		{500, Retryable},
		{502, Retryable},
		{503, Retryable},
		{504, Retryable},
		{408, Retryable},
		{429, Retryable},
		{400, Permanent},
		{401, Permanent},
		{403, Permanent},
		{404, Permanent},
		{410, Permanent},
		{422, Permanent},
		{304, Permanent},
	}
	for _, tt := range tests {
		t.Run(strconv.Itoa(tt.status), func(t *testing.T) {
			t.Parallel()
			var gotBody, gotID string
			rcv := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				gotBody, gotID = string(b), r.Header.Get("Webhook-Id")
				w.WriteHeader(tt.status)
				_, _ = io.WriteString(w, "answer")
			})
			out := postTo(t, rcv.URL, 5*time.Second, 1024, time.Now())
			if out.Result != tt.want {
				t.Fatalf("status %d: result %v (%q), want %v", tt.status, out.Result, out.Err, tt.want)
			}
			if out.StatusCode != tt.status {
				t.Errorf("StatusCode = %d, want %d", out.StatusCode, tt.status)
			}
			if gotBody != `{"n":1}` || gotID != "evt-1" {
				t.Errorf("receiver got body %q, Webhook-Id %q; want the request's", gotBody, gotID)
			}
			if tt.want == Delivered && out.Err != "" {
				t.Errorf("a delivery has Err %q", out.Err)
			}
			if tt.want != Delivered && !strings.Contains(out.Err, "HTTP ") {
				t.Errorf("Err = %q, want it to name the HTTP status", out.Err)
			}
			if bodyAllowed := tt.status != http.StatusNoContent && tt.status != http.StatusNotModified; bodyAllowed && out.Body != "answer" {
				t.Errorf("Body = %q, want %q", out.Body, "answer")
			}
			if out.Latency <= 0 {
				t.Errorf("Latency = %v, want > 0", out.Latency)
			}
		})
	}
}

func TestPostDoesNotFollowRedirects(t *testing.T) {
	t.Parallel()
	for _, status := range []int{301, 302, 303, 307, 308} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			t.Parallel()
			target := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {})
			rcv := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, target.URL+"/elsewhere", status)
			})
			out := postTo(t, rcv.URL, 5*time.Second, 1024, time.Now())
			if out.Result != Permanent || out.StatusCode != status {
				t.Fatalf("got %v %d, want permanent %d", out.Result, out.StatusCode, status)
			}
			if !strings.Contains(out.Err, "redirects are not followed") {
				t.Errorf("Err = %q, want it to say redirects are not followed", out.Err)
			}
			if rcv.hits.Load() != 1 {
				t.Errorf("the push URL got %d requests, want 1", rcv.hits.Load())
			}
			if n := target.hits.Load(); n != 0 {
				t.Errorf("the redirect target got %d requests; redirects must not be followed", n)
			}
		})
	}
}

func TestPostConnectionRefusedIsRetryable(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + l.Addr().String() + "/hook"
	_ = l.Close() // nothing listens there now
	out := postTo(t, url, 5*time.Second, 1024, time.Now())
	if out.Result != Retryable || out.StatusCode != 0 {
		t.Fatalf("got %v %d (%q), want retryable without a status", out.Result, out.StatusCode, out.Err)
	}
	if !strings.Contains(out.Err, "refused") {
		t.Errorf("Err = %q, want it to say the connection was refused", out.Err)
	}
}

func TestPostInvalidURLIsPermanent(t *testing.T) {
	t.Parallel()
	out := postTo(t, "http://[::1", time.Second, 1024, time.Now())
	if out.Result != Permanent || !strings.Contains(out.Err, "invalid push URL") {
		t.Fatalf("got %v (%q), want permanent: invalid push URL", out.Result, out.Err)
	}
}

func TestPostTimeoutIsRetryable(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	rcv := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done(): // the client gave up
		case <-release:
		}
	})
	t.Cleanup(func() { close(release) }) // runs before rcv.Close
	start := time.Now()
	out := postTo(t, rcv.URL, 150*time.Millisecond, 1024, time.Now())
	if out.Result != Retryable || out.StatusCode != 0 {
		t.Fatalf("got %v %d (%q), want retryable without a status", out.Result, out.StatusCode, out.Err)
	}
	if !strings.Contains(out.Err, "timeout") {
		t.Errorf("Err = %q, want it to start with timeout", out.Err)
	}
	if took := time.Since(start); took < 150*time.Millisecond || took > 3*time.Second {
		t.Errorf("post took %v, want about the 150ms client timeout", took)
	}
}

func TestPostCapsResponseBody(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		size    int
		maxBody int64
		want    int
	}{
		{"larger than the cap", 100_000, 100, 100},
		{"exactly the cap", 100, 100, 100},
		{"smaller than the cap", 10, 100, 10},
		{"huge body", 10 << 20, 4 << 10, 4 << 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rcv := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusInternalServerError)
				_, _ = io.WriteString(w, strings.Repeat("x", tt.size))
			})
			out := postTo(t, rcv.URL, 5*time.Second, tt.maxBody, time.Now())
			if len(out.Body) != tt.want {
				t.Errorf("Body has %d bytes, want %d", len(out.Body), tt.want)
			}
			if out.Result != Retryable {
				t.Errorf("result %v, want retryable", out.Result)
			}
		})
	}
}

func TestPostRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		status     int
		retryAfter string
		want       time.Duration
	}{
		{429, "3", 3 * time.Second},
		{503, "3", 3 * time.Second},
		{429, now.Add(time.Minute).Format(http.TimeFormat), time.Minute},
		{503, now.Add(-time.Minute).Format(http.TimeFormat), 0},
		{429, "garbage", 0},
		{429, "", 0},
		// Retry-After means nothing on other statuses.
		{500, "3", 0},
		{502, "3", 0},
		{504, "3", 0},
		{408, "3", 0},
		{200, "3", 0},
		{400, "3", 0},
	}
	for _, tt := range tests {
		t.Run(strconv.Itoa(tt.status)+"/"+tt.retryAfter, func(t *testing.T) {
			t.Parallel()
			rcv := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
				if tt.retryAfter != "" {
					w.Header().Set("Retry-After", tt.retryAfter)
				}
				w.WriteHeader(tt.status)
			})
			out := postTo(t, rcv.URL, 5*time.Second, 1024, now)
			if out.RetryAfter != tt.want {
				t.Errorf("RetryAfter = %v, want %v", out.RetryAfter, tt.want)
			}
		})
	}
}

// TestPostBodyIsText: a response body that is not UTF-8 text (binary, a
// character cut by the cap, NUL) is recorded as valid text, so that the
// database takes it.
func TestPostBodyIsText(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, "a\x00b\xffc€")
	})
	out := postTo(t, rcv.URL, 5*time.Second, 7, time.Now()) // cuts "€" after two of its three bytes
	if want := "a\uFFFDb\uFFFDc\uFFFD"; out.Body != want {
		t.Errorf("Body %q, want %q", out.Body, want)
	}
}
