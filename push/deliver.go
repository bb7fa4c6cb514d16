package push

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/roomhub/messaging-api/netguard"
	"github.com/roomhub/messaging-api/redact"
)

// Result says what became of one HTTP delivery attempt.
type Result int

const (
	Delivered Result = iota // 2xx
	Retryable               // connection error, timeout, 5xx, 408, 429
	Permanent               // any other status, or a target the SSRF guard refuses: retrying cannot help
)

func (r Result) String() string {
	return [...]string{"delivered", "retryable", "permanent"}[r]
}

// Outcome is one attempt's result with what the log records of it.
type Outcome struct {
	Result     Result
	StatusCode int           // 0 when no response came
	RetryAfter time.Duration // from a Retry-After header, 0 if none
	Latency    time.Duration
	Body       string // the first bytes of the response body
	Err        string // why it failed, for the log
}

// Request is one POST to a push URL.
type Request struct {
	URL     string
	Body    []byte
	Headers http.Header
	// Secrets are masked in the outcome's body and error: the credentials
	// the request carries (subscriptions.PushAuth.Secrets), which an
	// endpoint may echo.
	Secrets []string
}

// NewHTTPClient returns the client every delivery shares: bounded time per
// request, pooled connections, no redirects (a 3xx is a permanent failure)
// and no proxy. guard checks every request: its URL before anything is sent
// (https-only mode, literal addresses) and, at dial time, each address the
// host resolved to, right before connecting, so a name cannot resolve to a
// public address when checked and to an internal one when used.
func NewHTTPClient(timeout time.Duration, guard netguard.Guard) *http.Client {
	return newHTTPClient(timeout, guard, nil)
}

// newHTTPClient is NewHTTPClient resolving names with resolver (nil: the
// default one), so that tests can answer DNS themselves.
func newHTTPClient(timeout time.Duration, guard netguard.Guard, resolver *net.Resolver) *http.Client {
	dialer := guard.Dialer(&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second, Resolver: resolver})
	return &http.Client{
		Timeout: timeout,
		Transport: guardedTransport{guard: guard, next: &http.Transport{
			DialContext:           dialer.DialContext,
			MaxIdleConns:          512,
			MaxIdleConnsPerHost:   64,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   5 * time.Second,
			ResponseHeaderTimeout: timeout,
			ExpectContinueTimeout: time.Second,
			ForceAttemptHTTP2:     true,
		}},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// guardedTransport refuses a request whose URL the guard refuses before the
// transport sees it (the dial-time check covers resolved names).
type guardedTransport struct {
	guard netguard.Guard
	next  *http.Transport
}

func (t guardedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if err := t.guard.CheckURL(r.URL); err != nil {
		if r.Body != nil {
			_ = r.Body.Close() // a RoundTripper closes the body, even on error
		}
		return nil, err
	}
	return t.next.RoundTrip(r)
}

// CloseIdleConnections lets http.Client.CloseIdleConnections reach the pool.
func (t guardedTransport) CloseIdleConnections() { t.next.CloseIdleConnections() }

// storableText is a response body as text a database column holds: bytes
// that are not UTF-8 (a binary body, a character cut by the size cap) and
// NUL characters become U+FFFD, so that recording the outcome cannot fail on
// PostgreSQL (and reads the same on SQLite).
func storableText(b []byte) string {
	return strings.ToValidUTF8(strings.ReplaceAll(string(b), "\x00", "\uFFFD"), "\uFFFD")
}

// maskedText is the first limit bytes of body, with secrets masked before
// the cut, as storableText.
func maskedText(body []byte, secrets []string, limit int64) string {
	masked := redact.Values(string(body), secrets)
	if int64(len(masked)) > limit {
		masked = masked[:limit]
	}
	return storableText([]byte(masked))
}

func longest(ss []string) int {
	n := 0
	for _, s := range ss {
		n = max(n, len(s))
	}
	return n
}

// post delivers r and classifies the outcome; maxBody bounds what is read of
// the response. The credentials of r never appear in the outcome.
func post(ctx context.Context, client *http.Client, r Request, maxBody int64, now func() time.Time) Outcome {
	o := postUnmasked(ctx, client, r, maxBody, now)
	o.Err = redact.Values(o.Err, r.Secrets)
	return o
}

func postUnmasked(ctx context.Context, client *http.Client, r Request, maxBody int64, now func() time.Time) Outcome {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.URL, bytes.NewReader(r.Body))
	if err != nil {
		return Outcome{Result: Permanent, Err: "invalid push URL: " + err.Error()}
	}
	req.Header = r.Headers
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		// The same target would be refused again: dead-letter at once, and
		// say why without the transport's wrapping.
		if refused, ok := errors.AsType[*netguard.RefusedError](err); ok {
			return Outcome{Result: Permanent, Latency: time.Since(start), Err: refused.Error()}
		}
		return Outcome{Result: Retryable, Latency: time.Since(start), Err: describe(err)}
	}
	defer resp.Body.Close()
	// A secret that starts within maxBody is read whole, so that it is
	// masked whole rather than cut into a prefix that is not.
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxBody+int64(longest(r.Secrets))))
	// Drain a little more so the connection can be reused; give up on large bodies.
	_, _ = io.CopyN(io.Discard, resp.Body, 64<<10)
	o := Outcome{StatusCode: resp.StatusCode, Latency: time.Since(start), Body: maskedText(body, r.Secrets, maxBody)}
	switch c := resp.StatusCode; {
	case c >= 200 && c < 300:
		o.Result = Delivered
	case c >= 500, c == http.StatusRequestTimeout, c == http.StatusTooManyRequests:
		o.Result = Retryable
		o.Err = fmt.Sprintf("HTTP %d", c)
		if d, ok := ParseRetryAfter(resp.Header.Get("Retry-After"), now()); ok && (c == http.StatusTooManyRequests || c == http.StatusServiceUnavailable) {
			o.RetryAfter = d
		}
	default:
		o.Result = Permanent
		o.Err = fmt.Sprintf("HTTP %d", c)
		if c >= 300 && c < 400 {
			o.Err += " (redirects are not followed)"
		}
	}
	return o
}

func describe(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout: " + err.Error()
	default:
		return err.Error()
	}
}

// ParseRetryAfter reads a Retry-After value: delay-seconds or an HTTP date
// (RFC 9110 §10.2.3). A date in the past is a zero delay; either form is
// capped at a year (seconds too many for int64 included).
func ParseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	const maxDelay = 365 * 24 * time.Hour
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	secs, err := strconv.ParseInt(v, 10, 64)
	if errors.Is(err, strconv.ErrRange) && strings.Trim(v, "0123456789") == "" {
		secs, err = math.MaxInt64, nil // more seconds than int64 holds: the cap
	}
	if err == nil {
		if secs < 0 {
			return 0, false
		}
		return time.Duration(min(secs, int64(maxDelay/time.Second))) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return min(max(0, t.Sub(now)), maxDelay), true
}
