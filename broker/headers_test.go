package broker

import (
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/go-stomp/stomp/v3"
	"github.com/go-stomp/stomp/v3/frame"
)

func TestDecodeMessage(t *testing.T) {
	dest := Destination{Address: "room-1", Queue: "subscription-2"}
	for _, tc := range []struct {
		name    string
		headers []string
		want    Message
		wantErr bool
	}{
		{
			name: "ActiveMQClassicScheduledDelivery",
			headers: []string{
				"content-length", "7", "expires", "1795323390023", "x-expires", "1795323390000",
				"scheduledJobId", "ID:vm-1:2:-1:1:1", "correlation-id", "cid-1",
				"destination", "/queue/room-1::subscription-2", "ack", "ID:vm-1:1", "subscription", "3",
				"priority", "4", "x-attempt", "2", "message-id", "ID:vm-1:2:-1:1:1",
				"content-type", "application/json", "persistent", "true", "x-custom", "a:b\\c",
				"timestamp", "1795319790025", "redelivered", "true", "AMQ_SCHEDULED_DELAY", "500",
				"type", "jms-type", "reply-to", "/queue/r", "original-destination", "/queue/x",
			},
			want: Message{
				Destination: dest, CorrelationID: "cid-1", Attempt: 2, ContentType: "application/json",
				Expires: time.UnixMilli(1795323390000), Headers: map[string]string{"x-custom": "a:b\\c"},
			},
		},
		{
			name: "ArtemisDelivery",
			headers: []string{
				"destination", "room-1::subscription-2", "subscription", "1", "message-id", "123",
				"ack", "123", "expires", "0", "redelivered", "false", "priority", "4", "persistent", "true",
				"timestamp", "1", "destination-type", "ANYCAST", "ingress-timestamp", "2",
				"_AMQ_SCHED_DELIVERY", "3", "__AMQ_CID", "abc", "_AMQ_ROUTING_TYPE", "1",
				"JMSXUserID", "roomhub", "JMSXDeliveryCount", "2", "NATIVE_MESSAGE_ID", "x",
				"_HQ_ORIG_ADDRESS", "y", "activemq.originalDestination", "z",
				"x-attempt", "1", "x-event-id", "ev-9", "x-subscription-id", "s-1",
			},
			want: Message{
				Destination: dest, Attempt: 1,
				Headers: map[string]string{"x-event-id": "ev-9", "x-subscription-id": "s-1"},
			},
		},
		{
			name:    "BrokerExpiresWithoutOurs",
			headers: []string{"expires", "1795323390023"},
			want:    Message{Destination: dest, Expires: time.UnixMilli(1795323390023)},
		},
		{
			name:    "RepeatedHeaderFirstWins",
			headers: []string{"x-a", "first", "x-a", "second", "x-attempt", "3", "x-attempt", "4"},
			want:    Message{Destination: dest, Attempt: 3, Headers: map[string]string{"x-a": "first"}},
		},
		{
			name:    "MalformedAttempt",
			headers: []string{"x-attempt", "two", "correlation-id", "c"},
			want:    Message{Destination: dest, CorrelationID: "c"},
			wantErr: true,
		},
		{
			name:    "MalformedExpires",
			headers: []string{"expires", "soon", "x-attempt", "1"},
			want:    Message{Destination: dest, Attempt: 1},
			wantErr: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decodeMessage(dest, frame.NewHeader(tc.headers...), nil)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if err != nil && !errors.Is(err, errMalformedHeader) {
				t.Errorf("err = %v, want errMalformedHeader", err)
			}
			if got.Destination != tc.want.Destination || got.CorrelationID != tc.want.CorrelationID ||
				got.Attempt != tc.want.Attempt || got.ContentType != tc.want.ContentType ||
				!got.Expires.Equal(tc.want.Expires) || got.Delay != 0 {
				t.Errorf("got %+v\nwant %+v", got, tc.want)
			}
			if !maps.Equal(got.Headers, tc.want.Headers) {
				t.Errorf("Headers = %v, want %v", got.Headers, tc.want.Headers)
			}
			// Whatever came back can be republished.
			if err := validateMessage(got); err != nil {
				t.Errorf("decoded message is not sendable: %v", err)
			}
		})
	}
}

func TestEncodeHeaders(t *testing.T) {
	for _, tc := range []struct {
		name   string
		msg    Message
		want   map[string]string
		absent []string
	}{
		{
			name: "Full",
			msg: Message{CorrelationID: "c", Attempt: 3, Delay: 1500 * time.Millisecond, ContentType: "text/plain",
				Expires: time.UnixMilli(1_900_000_000_000), Headers: map[string]string{"x-e": "1"}},
			want: map[string]string{"persistent": "true", "correlation-id": "c", "x-attempt": "3",
				"AMQ_SCHEDULED_DELAY": "1500", "expires": "1900000000000", "x-expires": "1900000000000",
				"content-type": "text/plain", "x-e": "1"},
		},
		{
			name:   "Bare",
			msg:    Message{},
			want:   map[string]string{"persistent": "true", "x-attempt": "0"},
			absent: []string{"correlation-id", "AMQ_SCHEDULED_DELAY", "expires", "x-expires", "content-type"},
		},
		{
			name: "DelayRoundsUp",
			msg:  Message{Delay: time.Nanosecond},
			want: map[string]string{"AMQ_SCHEDULED_DELAY": "1"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := map[string]string{}
			for _, h := range encodeHeaders(tc.msg) {
				if _, dup := got[h[0]]; dup {
					t.Errorf("header %s written twice", h[0])
				}
				got[h[0]] = h[1]
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Errorf("%s = %q, want %q", k, got[k], v)
				}
			}
			for _, k := range tc.absent {
				if _, ok := got[k]; ok {
					t.Errorf("%s present, want absent", k)
				}
			}
		})
	}
}

func TestValidateMessage(t *testing.T) {
	ok := Destination{Address: "room-1", Queue: "subscription-2"}
	for _, tc := range []struct {
		name    string
		msg     Message
		wantErr string
	}{
		{"Valid", Message{Destination: ok, Headers: map[string]string{"x-event-id": "1"}, Attempt: 1}, ""},
		{"ValidDots", Message{Destination: Destination{Address: "brokertest.ab12", Queue: "q-1_x"}}, ""},
		{"EmptyAddress", Message{Destination: Destination{Queue: "q"}}, "empty address"},
		{"EmptyQueue", Message{Destination: Destination{Address: "a"}}, "empty queue"},
		{"FQQNSeparator", Message{Destination: Destination{Address: "a::b", Queue: "q"}}, `address contains "::"`},
		{"Wildcard", Message{Destination: Destination{Address: "a", Queue: "q*"}}, `queue contains "*"`},
		{"Composite", Message{Destination: Destination{Address: "a,b", Queue: "q"}}, `address contains ","`},
		{"Blank", Message{Destination: Destination{Address: "a", Queue: "q 1"}}, `queue contains " "`},
		{"Newline", Message{Destination: Destination{Address: "a\n", Queue: "q"}}, `address contains "\n"`},
		{"NegativeAttempt", Message{Destination: ok, Attempt: -1}, "negative attempt"},
		{"NegativeDelay", Message{Destination: ok, Delay: -1}, "negative delay"},
		{"ExpiresAtEpoch", Message{Destination: ok, Expires: time.Unix(0, 0)}, "not after the Unix epoch"},
		{"EmptyHeaderName", Message{Destination: ok, Headers: map[string]string{"": "x"}}, "empty header name"},
		{"ScheduledJobID", Message{Destination: ok, Headers: map[string]string{"scheduledJobId": "x"}}, `"scheduledJobId" is reserved`},
		{"Expires", Message{Destination: ok, Headers: map[string]string{"expires": "1"}}, `"expires" is reserved`},
		{"ScheduledTime", Message{Destination: ok, Headers: map[string]string{"AMQ_SCHEDULED_TIME": "1"}}, "reserved"},
		{"ArtemisInternal", Message{Destination: ok, Headers: map[string]string{"_AMQ_DUPL_ID": "1"}}, "reserved"},
		{"Classic", Message{Destination: ok, Headers: map[string]string{"activemq.prefetchSize": "1"}}, "reserved"},
		{"OurExpiresAt", Message{Destination: ok, Headers: map[string]string{"x-expires": "1"}}, "reserved"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := validateMessage(tc.msg)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("got %v, want valid", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("got %v, want an error mentioning %s", err, tc.wantErr)
			}
		})
	}
}

func TestIsRefusal(t *testing.T) {
	withBody := frame.New(frame.ERROR, frame.Message, "not allowed")
	withBody.Body = []byte("details")
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"BrokerErrorWithReceipt", stompErr(frame.New(frame.ERROR, frame.Message, "no", frame.ReceiptId, "1")), true},
		{"BrokerErrorWithBody", stompErr(withBody), true},
		{"GoStompNetworkError", stompErr(frame.New(frame.ERROR, frame.Message, "connection closed")), false},
		{"PlainError", errors.New("boom"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := isRefusal(tc.err); got != tc.want {
				t.Errorf("isRefusal = %v, want %v", got, tc.want)
			}
		})
	}
}

// stompErr is an error as go-stomp returns it for an ERROR frame, wrapped as
// conn.send wraps it.
func stompErr(f *frame.Frame) error {
	return fmt.Errorf("broker: send: %w", stomp.Error{Message: f.Header.Get(frame.Message), Frame: f})
}
