package broker

import (
	"bytes"
	"errors"
	"maps"
	"strconv"
	"testing"
	"time"

	"github.com/go-stomp/stomp/v3/frame"
)

// FuzzHeaderRoundTrip: a message Send accepts comes back from a MESSAGE
// frame as it was sent, whatever its header values hold (':', '\n', '\r',
// '\\', NUL, non-UTF-8): encodeHeaders, go-stomp's frame writer (STOMP 1.2
// escaping), its reader, then decodeMessage among the headers a broker adds.
func FuzzHeaderRoundTrip(f *testing.F) {
	f.Add("x-event-type", "order.created", "cid-1", "application/json", 1, int64(0), int64(0), []byte(`{"a":1}`))
	f.Add("x-attr-note", "a:b\\c\nd\re", "c:i\\d", "text/plain; charset=utf-8", 3, int64(1500), int64(1_900_000_000_123), []byte{0, 1, 0})
	f.Add("x-attr-k", "\\n\\c\\\\\\r", "\r\n", "", 0, int64(1), int64(1), []byte(nil))
	f.Add("x:y\nz", "", "", "", 2, int64(-1), int64(-1), []byte("\x00"))
	f.Add("x-attr-ü", "\u2028\xff\x00", "\\", ":", 9, int64(1<<40), int64(1<<62), []byte("b"))
	f.Add("expires", "1", "", "", 1, int64(0), int64(0), []byte(nil))
	f.Fuzz(func(t *testing.T, name, value, correlationID, contentType string, attempt int, delayMs, expiresMs int64, body []byte) {
		dest := Destination{Address: "room-1", Queue: "subscription-2"}
		msg := Message{
			Destination: dest, Headers: map[string]string{name: value}, Body: body,
			ContentType: contentType, CorrelationID: correlationID, Attempt: attempt,
			Delay: time.Duration(delayMs) * time.Millisecond,
		}
		if expiresMs != 0 {
			msg.Expires = time.UnixMilli(expiresMs)
		}
		if validateMessage(msg) != nil {
			return
		}
		send := frame.New(frame.SEND, frame.Destination, dest.FQQN())
		for _, h := range encodeHeaders(msg) {
			send.Header.Set(h[0], h[1])
		}
		send.Header.Set(frame.ContentLength, strconv.Itoa(len(body)))
		send.Body = body
		got := roundTrip(t, send)
		if got.Command != frame.SEND || !bytes.Equal(got.Body, body) {
			t.Fatalf("frame came back as %s with body %q", got.Command, got.Body)
		}
		// The broker turns the SEND into a MESSAGE with headers of its own.
		headers := []string{frame.MessageId, "ID:b-1:1:1:1", frame.Subscription, "0", frame.Ack, "ID:b-1:2",
			"redelivered", "false", "priority", "4", "timestamp", "1795319790025"}
		for i := 0; i < got.Header.Len(); i++ {
			k, v := got.Header.GetAt(i)
			headers = append(headers, k, v)
		}
		back, err := decodeMessage(dest, frame.NewHeader(headers...), got.Body)
		if err != nil {
			t.Fatalf("decodeMessage: %v", err)
		}
		if !maps.Equal(back.Headers, msg.Headers) {
			t.Fatalf("headers %q came back as %q", msg.Headers, back.Headers)
		}
		if back.CorrelationID != msg.CorrelationID || back.ContentType != msg.ContentType || back.Attempt != msg.Attempt ||
			back.Delay != 0 || back.Expires.UnixMilli() != msg.Expires.UnixMilli() || !bytes.Equal(back.Body, body) {
			t.Fatalf("sent %+v\ngot  %+v", msg, back)
		}
		if err := validateMessage(back); err != nil {
			t.Fatalf("a delivered message cannot be sent again: %v", err)
		}
	})
}

// FuzzDecodeMessage: whatever headers a MESSAGE frame carries, decodeMessage
// does not panic; x-attempt, expires and x-expires that are not
// non-negative decimal integers are reported as errMalformedHeader and leave
// the field zero; and what it returns can be sent again.
func FuzzDecodeMessage(f *testing.F) {
	f.Add("2", "1795323390023", "1795323390000", "x-custom", "v")
	f.Add("two", "soon", "", "", "")
	f.Add("-1", "-1", "-5", "expires", "1")
	f.Add("99999999999999999999", "9223372036854775807", "9223372036854775808", "AMQ_SCHEDULED_DELAY", "1")
	f.Add("+3", " 1", "0x10", "x-attempt", "4")
	f.Add("", "0", "0", "x-a", "\x00")
	f.Fuzz(func(t *testing.T, attempt, expires, ourExpires, name, value string) {
		dest := Destination{Address: "room-1", Queue: "subscription-2"}
		var headers []string
		if name != "" { // a STOMP frame cannot carry an empty header name
			headers = append(headers, name, value)
		}
		headers = append(headers, HeaderAttempt, attempt, HeaderExpires, expires)
		if ourExpires != "" {
			headers = append(headers, headerExpiresAt, ourExpires)
		}
		msg, err := decodeMessage(dest, frame.NewHeader(headers...), nil)
		if err != nil && !errors.Is(err, errMalformedHeader) {
			t.Fatalf("error %v is not errMalformedHeader", err)
		}
		if name == HeaderAttempt {
			attempt = value // the first occurrence wins
		}
		if n, perr := strconv.Atoi(attempt); perr != nil || n < 0 {
			if msg.Attempt != 0 || err == nil {
				t.Fatalf("x-attempt %q: Attempt %d, err %v", attempt, msg.Attempt, err)
			}
		} else if msg.Attempt != n {
			t.Fatalf("x-attempt %q: Attempt %d", attempt, msg.Attempt)
		}
		if msg.Attempt < 0 || (!msg.Expires.IsZero() && msg.Expires.UnixMilli() < 1) {
			t.Fatalf("decoded %+v", msg)
		}
		if err := validateMessage(msg); err != nil {
			t.Fatalf("decoded message cannot be sent again: %v", err)
		}
	})
}

// roundTrip writes f as go-stomp's client does and reads it back as its
// receiving side does.
func roundTrip(t *testing.T, f *frame.Frame) *frame.Frame {
	t.Helper()
	var buf bytes.Buffer
	w := frame.NewWriter(&buf)
	if err := w.Write(f); err != nil {
		t.Fatalf("write frame: %v", err)
	}
	got, err := frame.NewReader(&buf).Read()
	if err != nil || got == nil {
		t.Fatalf("read frame %q: %v", buf.Bytes(), err)
	}
	return got
}
