package broker

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// headerExpiresAt carries Message.Expires (epoch ms) unchanged from Send to
// delivery. The broker's own expires header does not always survive: ActiveMQ
// Classic re-stamps a scheduled message when it fires and keeps its time to live,
// so the expires it delivers is later than the one sent (and Send has to
// compensate, see activeMQ.sendHeaders).
const headerExpiresAt = "x-expires"

// isBrokerHeader reports whether name is set or interpreted by STOMP, by a broker
// or by this package. Such headers are stripped from deliveries and refused in
// Message.Headers, so a Delivery's Message can be republished as is: copying
// scheduledJobId makes ActiveMQ Classic ignore the new delay, copying message-id
// or destination confuses both brokers (ARCHITECTURE.md, "Never copy broker headers").
//
// The list is explicit on purpose: a header that is not on it is an application
// header and travels untouched.
func isBrokerHeader(name string) bool {
	switch name {
	// STOMP frame headers (SEND, SUBSCRIBE, MESSAGE, ACK, RECEIPT).
	case "message-id", "destination", "subscription", "ack", "id",
		"receipt", "receipt-id", "transaction", "content-length":
		return true
	// Headers this package writes and parses into Message fields.
	case HeaderCorrelationID, HeaderAttempt, HeaderExpires, HeaderPersistent,
		HeaderContentType, HeaderScheduledDelay, headerExpiresAt:
		return true
	// JMS-style headers both brokers add to every MESSAGE.
	case "priority", "timestamp", "redelivered", "type", "reply-to":
		return true
	// ActiveMQ Classic.
	case "scheduledJobId", "original-destination", "originalDestination":
		return true
	// Artemis: routing, flow control and the STOMP extensions it adds on MESSAGE.
	case "destination-type", "subscription-type", "consumer-window-size",
		"ingress-timestamp", "NATIVE_MESSAGE_ID":
		return true
	}
	for _, prefix := range []string{
		"AMQ_SCHEDULED_", // AMQ_SCHEDULED_DELAY, _TIME, _PERIOD, _REPEAT, _CRON
		"_AMQ_",          // Artemis internal properties (_AMQ_SCHED_DELIVERY, _AMQ_ORIG_*, ...)
		"__AMQ_",         // Artemis internal properties (__AMQ_CID)
		"_HQ_",           // HornetQ-era Artemis properties
		"JMSX",           // JMSXUserID, JMSXGroupID, JMSXDeliveryCount
		"activemq.",      // ActiveMQ Classic STOMP extensions (activemq.prefetchSize, ...)
	} {
		if strings.HasPrefix(name, prefix) {
			return true
		}
	}
	return false
}

// validateDestination refuses names that the brokers would read as something else:
// "::" splits an FQQN, '*' '>' '#' are wildcards and ',' builds composite
// destinations on ActiveMQ Classic or Artemis; blanks and control characters
// have no business in a queue name.
func validateDestination(d Destination) error {
	for _, part := range []struct{ field, value string }{{"address", d.Address}, {"queue", d.Queue}} {
		if part.value == "" {
			return fmt.Errorf("broker: destination %q: empty %s", d.FQQN(), part.field)
		}
		if strings.Contains(part.value, "::") {
			return fmt.Errorf("broker: destination %q: %s contains \"::\"", d.FQQN(), part.field)
		}
		if i := strings.IndexFunc(part.value, func(r rune) bool {
			return r <= ' ' || r == 0x7f || strings.ContainsRune("*>#,", r)
		}); i >= 0 {
			return fmt.Errorf("broker: destination %q: %s contains %q", d.FQQN(), part.field, part.value[i:i+1])
		}
	}
	return nil
}

// validateMessage checks what both implementations need before accepting msg.
func validateMessage(msg Message) error {
	if err := validateDestination(msg.Destination); err != nil {
		return err
	}
	if msg.Attempt < 0 {
		return fmt.Errorf("broker: message for %s: negative attempt %d", msg.Destination, msg.Attempt)
	}
	if msg.Delay < 0 {
		return fmt.Errorf("broker: message for %s: negative delay %s", msg.Destination, msg.Delay)
	}
	if !msg.Expires.IsZero() && msg.Expires.UnixMilli() < 1 {
		// expires:0 means "never" on the wire.
		return fmt.Errorf("broker: message for %s: expiry %s is not after the Unix epoch", msg.Destination, msg.Expires)
	}
	for name := range msg.Headers {
		if name == "" {
			return fmt.Errorf("broker: message for %s: empty header name", msg.Destination)
		}
		if isBrokerHeader(name) {
			return fmt.Errorf("broker: message for %s: header %q is reserved for the broker", msg.Destination, name)
		}
	}
	return nil
}

// delayMillis is the AMQ_SCHEDULED_DELAY value for d: whole milliseconds,
// rounded up so that the broker never delivers earlier than asked.
func delayMillis(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// encodeHeaders returns the headers of a SEND frame for msg, except destination
// and content-length, which belong to the frame itself.
func encodeHeaders(msg Message) [][2]string {
	h := make([][2]string, 0, len(msg.Headers)+6)
	h = append(h, [2]string{HeaderPersistent, "true"})
	if msg.CorrelationID != "" {
		h = append(h, [2]string{HeaderCorrelationID, msg.CorrelationID})
	}
	h = append(h, [2]string{HeaderAttempt, strconv.Itoa(msg.Attempt)})
	if msg.Delay > 0 {
		h = append(h, [2]string{HeaderScheduledDelay, strconv.FormatInt(delayMillis(msg.Delay), 10)})
	}
	if !msg.Expires.IsZero() {
		ms := strconv.FormatInt(msg.Expires.UnixMilli(), 10)
		h = append(h, [2]string{HeaderExpires, ms}, [2]string{headerExpiresAt, ms})
	}
	if msg.ContentType != "" {
		h = append(h, [2]string{HeaderContentType, msg.ContentType})
	}
	for k, v := range msg.Headers {
		h = append(h, [2]string{k, v})
	}
	return h
}

// headerReader is the part of a received frame's header decodeMessage needs;
// go-stomp's *frame.Header satisfies it.
type headerReader interface {
	Len() int
	GetAt(i int) (key, value string)
}

// errMalformedHeader marks a MESSAGE whose x-attempt or expires cannot be parsed.
var errMalformedHeader = errors.New("broker: malformed header")

// decodeMessage rebuilds the Message that was sent from a MESSAGE frame's headers.
// When a header repeats, the first occurrence wins (STOMP 1.2). A malformed
// x-attempt or expires leaves the field zero and is reported, wrapped in
// errMalformedHeader, next to a still usable Message.
func decodeMessage(dest Destination, h headerReader, body []byte) (Message, error) {
	msg := Message{Destination: dest, Body: body}
	seen := make(map[string]bool, h.Len())
	var (
		errs          []error
		brokerExpires int64 // the broker's view, possibly moved by a schedule
		sentExpires   int64 // exactly what Send was given
		haveSent      bool
	)
	for i := 0; i < h.Len(); i++ {
		k, v := h.GetAt(i)
		if seen[k] {
			continue
		}
		seen[k] = true
		switch k {
		case HeaderCorrelationID:
			msg.CorrelationID = v
		case HeaderContentType:
			msg.ContentType = v
		case HeaderAttempt:
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				errs = append(errs, fmt.Errorf("%w: %s %q", errMalformedHeader, k, v))
				continue
			}
			msg.Attempt = n
		case HeaderExpires, headerExpiresAt:
			ms, err := strconv.ParseInt(v, 10, 64)
			if err != nil || ms < 0 {
				errs = append(errs, fmt.Errorf("%w: %s %q", errMalformedHeader, k, v))
				continue
			}
			if k == HeaderExpires {
				brokerExpires = ms
			} else {
				sentExpires, haveSent = ms, true
			}
		default:
			if isBrokerHeader(k) {
				continue
			}
			if msg.Headers == nil {
				msg.Headers = make(map[string]string)
			}
			msg.Headers[k] = v
		}
	}
	if !haveSent {
		sentExpires = brokerExpires // sent by another client
	}
	if sentExpires > 0 { // 0 means never
		msg.Expires = time.UnixMilli(sentExpires)
	}
	return msg, errors.Join(errs...)
}

// cloneMessage deep-copies the parts of msg a caller could mutate afterwards.
func cloneMessage(msg Message) Message {
	if msg.Headers != nil {
		h := make(map[string]string, len(msg.Headers))
		for k, v := range msg.Headers {
			h[k] = v
		}
		msg.Headers = h
	}
	if msg.Body != nil {
		msg.Body = append([]byte(nil), msg.Body...)
	}
	return msg
}
