package broker

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/go-stomp/stomp/v3"
	"github.com/go-stomp/stomp/v3/frame"
)

// activeMQ is the dialect of ActiveMQ Classic (5.17; see ARCHITECTURE.md,
// "Facts about the brokers"): destinations are plain queue names, queues come
// and stay by themselves, prefetch counts messages, and a scheduled message
// fires with its expiry moved by the delay.
type activeMQ struct{}

func newActiveMQ(*stompBroker) (dialect, error) { return activeMQ{}, nil }

// destination: Classic 5.17 reads a name without prefix as a queue as well
// (checked), but older Classic versions refuse it, so the prefix is explicit.
func (activeMQ) destination(d Destination) string { return "/queue/" + d.FQQN() }

// unsendable refuses a message that would expire before it is due. A broker
// accepts and drops such a message; Classic cannot be told (see
// sendHeaders), so it is not sent and the caller hears why, to record it as
// expired.
func (activeMQ) unsendable(msg Message, now time.Time) error {
	if msg.Delay > 0 && !msg.Expires.IsZero() && !msg.Expires.After(now.Add(msg.Delay)) {
		return ErrExpired
	}
	return nil
}

// sendHeaders sends the expiry of a scheduled message early by its delay:
// Classic fires a scheduled message with a new timestamp and the same time to
// live (expires - timestamp), which moves the expiry by the delay (measured
// on 5.17). Sent that much earlier it lands where asked, late by the
// scheduler's lateness at most; deliveries past Expires are dropped by the
// subscription, which reads x-expires.
func (activeMQ) sendHeaders(msg Message, headers [][2]string) [][2]string {
	if msg.Delay > 0 && !msg.Expires.IsZero() {
		early := strconv.FormatInt(msg.Expires.UnixMilli()-delayMillis(msg.Delay), 10)
		headers = append(headers, [2]string{HeaderExpires, early})
	}
	return headers
}

func (activeMQ) subscribeOptions(prefetch int) []func(*frame.Frame) error {
	return []func(*frame.Frame) error{
		stomp.SubscribeOpt.Header("activemq.prefetchSize", strconv.Itoa(prefetch)),
	}
}

// full: Classic stops sending once the unacked messages reach the prefetch.
func (activeMQ) full(w *window, prefetch int) bool { return w.count.Load() >= int64(prefetch) }

// addressFull: with sendFailIfNoSpace the ERROR frame's message header is
// "Usage Manager Memory Limit reached. Stopping producer ... See
// .../producer-flow-control.html", and its body the
// ResourceAllocationException's stack trace.
func (activeMQ) addressFull(refusal string) bool {
	for _, mark := range []string{"ResourceAllocationException", "Usage Manager Memory Limit reached", "producer-flow-control"} {
		if strings.Contains(refusal, mark) {
			return true
		}
	}
	return false
}

// beforeSend has nothing to do: Classic creates a queue on its first SEND or
// SUBSCRIBE and never deletes it by itself.
func (activeMQ) beforeSend(context.Context, Destination) error { return nil }

// ensureQueue has nothing to do, as beforeSend.
func (activeMQ) ensureQueue(context.Context, Destination) error { return nil }

// deleteQueue cannot: Classic offers no way to delete a destination over
// STOMP (only JMX, which is off); its messages stay until consumed or
// expired.
func (activeMQ) deleteQueue(context.Context, Destination) error { return nil }

// prepare has nothing to read: Classic shows no settings over STOMP;
// docs/operations.md lists what it needs.
func (activeMQ) prepare(context.Context, []string) ([]string, error) { return nil, nil }
