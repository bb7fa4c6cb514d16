package push

import (
	"bytes"
	"encoding/json"
	"maps"
	"math"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-stomp/stomp/v3/frame"
	"github.com/google/uuid"

	"github.com/roomhub/messaging-api/broker"
	"github.com/roomhub/messaging-api/message"
	"github.com/roomhub/messaging-api/subscriptions"
)

// What publish accepts (publish/service.go, rooms/service.go).
var (
	attributeName   = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9_.-]{0,63}$`)
	eventIdentifier = regexp.MustCompile(`^[a-zA-Z0-9_.-]+$`)
	printableASCII  = regexp.MustCompile(`^[\x21-\x7e][\x20-\x7e]*$`)
)

// retryAfterCap is ParseRetryAfter's bound on a delay.
const retryAfterCap = 365 * 24 * time.Hour

var fuzzNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// FuzzParseRetryAfter: never panics, never negative, at most a year; a
// value of digits is always understood (a huge one as the cap); anything
// else it understands is an HTTP date.
func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{"120", "  7 ", "0", "00", "+5", "-5", "1.5", "1e3", "NaN", "Infinity", "0x10",
		"99999999999", "9223372036854775807", "9223372036854775808", "99999999999999999999999999",
		"٣", "１２", "\t3\r\n", "soon", "",
		"Sun, 01 Mar 2026 12:01:30 GMT", "Sunday, 01-Mar-26 13:00:00 GMT", "Sun Mar  1 12:00:30 2026",
		"Fri, 31 Dec 9999 23:59:59 GMT", "Mon, 01 Jan 0001 00:00:00 GMT", "Sun, 01 Mar 2026 12:01:30 UTC",
		"2026-03-01T12:00:00Z", "Sun, 31 Feb 2026 12:00:00 GMT", "Sun, 01 Mar 2026 25:00:00 GMT"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		d, ok := ParseRetryAfter(v, fuzzNow)
		if d < 0 || d > retryAfterCap || (!ok && d != 0) {
			t.Fatalf("ParseRetryAfter(%q) = %v, %v", v, d, ok)
		}
		s := strings.TrimSpace(v)
		if s != "" && strings.Trim(s, "0123456789") == "" {
			want := retryAfterCap
			if n, err := strconv.ParseInt(s, 10, 64); err == nil && n < int64(retryAfterCap/time.Second) {
				want = time.Duration(n) * time.Second
			}
			if !ok || d != want {
				t.Fatalf("ParseRetryAfter(%q) = %v, %v; want %v", v, d, ok, want)
			}
			return
		}
		if !ok {
			return
		}
		if _, err := strconv.ParseInt(s, 10, 64); err == nil {
			return // "+5": ParseInt's leniency
		}
		at, err := http.ParseTime(s)
		if err != nil {
			t.Fatalf("ParseRetryAfter(%q) = %v, true for neither seconds nor an HTTP date", v, d)
		}
		if want := min(max(0, at.Sub(fuzzNow)), retryAfterCap); d != want {
			t.Fatalf("ParseRetryAfter(%q) = %v; the date is %v away", v, d, want)
		}
	})
}

// FuzzRetryAfterForms: "N" and the HTTP date N seconds from now, in each of
// the three date formats, mean the same delay.
func FuzzRetryAfterForms(f *testing.F) {
	for _, secs := range []int64{0, 1, 59, 3600, -1, -3600, int64(retryAfterCap / time.Second), int64(retryAfterCap/time.Second) + 1, 20 * 365 * 86400} {
		f.Add(secs, uint8(0))
		f.Add(secs, uint8(1))
		f.Add(secs, uint8(2))
	}
	f.Fuzz(func(t *testing.T, secs int64, format uint8) {
		layout := []string{http.TimeFormat, time.RFC850, time.ANSIC}[int(format)%3]
		limit := int64(7000 * 365 * 86400) // years 0001–9999 around 2026
		if layout == time.RFC850 {
			limit = 40 * 365 * 86400 // a two-digit year means 1969–2068
		}
		if secs < -limit || secs > limit {
			return
		}
		date := fuzzNow.Add(time.Duration(secs) * time.Second).Format(layout)
		if layout == time.RFC850 {
			date = strings.Replace(date, "UTC", "GMT", 1)
		}
		fromDate, okDate := ParseRetryAfter(date, fuzzNow)
		fromDelta, okDelta := ParseRetryAfter(strconv.FormatInt(secs, 10), fuzzNow)
		if !okDate {
			t.Fatalf("date %q not understood", date)
		}
		if secs < 0 {
			if okDelta || fromDate != 0 {
				t.Fatalf("%d s: %v, %v; date %q: %v", secs, fromDelta, okDelta, date, fromDate)
			}
			return
		}
		if !okDelta || fromDelta != fromDate {
			t.Fatalf("%d s gives %v, %v; the date %q gives %v", secs, fromDelta, okDelta, date, fromDate)
		}
	})
}

// FuzzEventOf: the event a push delivery rebuilds from the broker message
// (message.Encode → STOMP frame → message.Decode) is the event published, for
// any header value; and an attribute that is a valid HTTP field value
// reaches the push request unchanged as X-Attr-<name>.
func FuzzEventOf(f *testing.F) {
	f.Add("order.created", 1, "region", "eu", "cid-1", int64(1_772_366_400_123_456), int64(1_772_370_000_123), 1)
	f.Add("a", 1_000_000, "note", "a:b\\c\nd\r", "c", int64(0), int64(0), 2)
	f.Add("x", math.MaxInt, "Key.with-dots_1", "\\c\\n\\\\", "k", int64(-1), int64(1), 7)
	f.Add("x", 0, "k", " spaced \t", "", int64(253_402_300_799_999_999), int64(253_402_300_799_999), 1)
	f.Add("x", -1, "k", "\x00\xff\u2028", "z", int64(math.MinInt64), int64(math.MaxInt64), 0)
	f.Fuzz(func(t *testing.T, eventType string, version int, attrName, attrValue, correlationID string,
		publishedUs, expiresMs int64, attempt int) {
		if !attributeName.MatchString(attrName) {
			return // publish refuses it
		}
		// Publish times come from the clock: years 1970–9999.
		publishedUs = clamp(publishedUs, 0, 253_402_300_799_999_999)
		expiresMs = clamp(expiresMs, 0, 253_402_300_799_999)
		ev := message.Event{
			ID: uuid.NewSHA1(uuid.NameSpaceURL, []byte(eventType)), RoomID: uuid.NewSHA1(uuid.NameSpaceOID, []byte(attrName)),
			CorrelationID: correlationID, EventType: eventType, Version: version,
			Payload: json.RawMessage(`{"a":1}`), Attributes: map[string]string{attrName: attrValue},
			PublishedAt: time.UnixMicro(publishedUs).UTC(),
		}
		if expiresMs > 0 {
			ev.ExpiresAt = time.UnixMilli(expiresMs).UTC()
		}
		send := message.Send{ID: uuid.New(), SubscriptionID: uuid.New(), CorrelationID: correlationID, Attempt: attempt, Destination: "push::dispatch"}
		msg := message.Encode(send, ev, fuzzNow)

		d := &broker.Delivery{Message: msg}
		d.Headers = overTheWire(t, msg.Headers)
		got := message.Decode(d)
		if got.ID != ev.ID || got.RoomID != ev.RoomID || got.EventType != ev.EventType || got.Version != ev.Version ||
			got.CorrelationID != ev.CorrelationID || !got.PublishedAt.Equal(ev.PublishedAt) || !got.ExpiresAt.Equal(ev.ExpiresAt) ||
			!bytes.Equal(got.Payload, ev.Payload) || !maps.Equal(got.Attributes, ev.Attributes) {
			t.Fatalf("published %+v\nrebuilt   %+v", ev, got)
		}

		sub := subscriptions.Subscription{ID: send.SubscriptionID, PushURL: "http://example.test/hook", SigningSecret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}
		req := (&Dispatcher{}).request(sub, got, d, fuzzNow, "")
		// Publish lets only these through; the attribute value is checked below.
		checked := eventIdentifier.MatchString(eventType) && printableASCII.MatchString(correlationID)
		for k, vs := range req.Headers {
			for _, v := range vs {
				if checked && k != http.CanonicalHeaderKey("X-Attr-"+attrName) && !validFieldValue(v) {
					t.Fatalf("header %s: %q is not a valid HTTP field value", k, v)
				}
			}
		}
		if validFieldValue(attrValue) {
			if v := req.Headers.Get("X-Attr-" + attrName); v != attrValue {
				t.Fatalf("X-Attr-%s = %q, want %q", attrName, v, attrValue)
			}
		}
	})
}

// FuzzEventOfHeaders: message.Decode never panics on what a foreign or broken
// sender puts in the numeric and id headers; garbage leaves the field zero
// and a decimal integer is read as one.
func FuzzEventOfHeaders(f *testing.F) {
	f.Add("1772370000123", "1772366400123456", "3", "0190b7a4-8f7e-7c3e-9c1a-2b7f0d1e2a3b")
	f.Add("soon", "yesterday", "v2", "not-a-uuid")
	f.Add("-1", "-9223372036854775808", "-3", "")
	f.Add("9223372036854775807", "9223372036854775807", "99999999999999999999", "{0190b7a4-8f7e-7c3e-9c1a-2b7f0d1e2a3b}")
	f.Add("1e3", "0x10", "+4", "urn:uuid:0190b7a4-8f7e-7c3e-9c1a-2b7f0d1e2a3b")
	f.Fuzz(func(t *testing.T, expiresAt, publishedAt, version, eventID string) {
		d := &broker.Delivery{Message: broker.Message{Headers: map[string]string{
			message.HeaderExpiresAt: expiresAt, message.HeaderPublishedAt: publishedAt,
			message.HeaderEventVersion: version, message.HeaderEventID: eventID,
		}}}
		ev := message.Decode(d)
		if ms, err := strconv.ParseInt(expiresAt, 10, 64); err != nil {
			if !ev.ExpiresAt.IsZero() {
				t.Fatalf("x-expires-at %q gives %v", expiresAt, ev.ExpiresAt)
			}
		} else if ev.ExpiresAt.UnixMilli() != ms {
			t.Fatalf("x-expires-at %q gives %v", expiresAt, ev.ExpiresAt)
		}
		if us, err := strconv.ParseInt(publishedAt, 10, 64); err != nil {
			if !ev.PublishedAt.IsZero() {
				t.Fatalf("x-published-at %q gives %v", publishedAt, ev.PublishedAt)
			}
		} else if !ev.PublishedAt.Equal(time.UnixMicro(us)) {
			t.Fatalf("x-published-at %q gives %v", publishedAt, ev.PublishedAt)
		}
		if n, err := strconv.Atoi(version); (err == nil && ev.Version != n) || (err != nil && ev.Version != 0) {
			t.Fatalf("x-event-version %q gives %d", version, ev.Version)
		}
		if id, err := uuid.Parse(eventID); (err == nil && ev.ID != id) || (err != nil && ev.ID != uuid.Nil) {
			t.Fatalf("x-event-id %q gives %v", eventID, ev.ID)
		}
	})
}

// overTheWire sends headers through go-stomp's frame writer and reader, as
// the broker connection does, and returns them as a Delivery holds them.
func overTheWire(t *testing.T, headers map[string]string) map[string]string {
	t.Helper()
	f := frame.New(frame.MESSAGE)
	for k, v := range headers {
		f.Header.Add(k, v)
	}
	var buf bytes.Buffer
	if err := frame.NewWriter(&buf).Write(f); err != nil {
		t.Fatalf("write frame: %v", err)
	}
	got, err := frame.NewReader(&buf).Read()
	if err != nil || got == nil {
		t.Fatalf("read frame %q: %v", buf.Bytes(), err)
	}
	out := map[string]string{}
	for i := 0; i < got.Header.Len(); i++ {
		k, v := got.Header.GetAt(i)
		out[k] = v
	}
	return out
}

// validFieldValue is RFC 9110's field-value as net/http checks it before
// sending: no control characters but horizontal tab.
func validFieldValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if b := v[i]; (b < ' ' && b != '\t') || b == 0x7f {
			return false
		}
	}
	return true
}

func clamp(v, lo, hi int64) int64 { return min(max(v, lo), hi) }
