// Package broker is the only code that talks to a message broker. It defines the
// Broker interface the rest of the service uses and implements it twice: over
// STOMP (stomp.go), with one dialect per broker (Apache ActiveMQ Artemis in
// artemis.go, ActiveMQ Classic in activemq.go), and as an in-process,
// non-durable broker for `make run` and fast tests (see embedded.go).
package broker

import (
	"context"
	"errors"
	"time"
)

// Header names the service puts on every message it sends. Broker-owned headers
// (message-id, ack, subscription, destination, scheduledJobId, ...) are never
// copied onto a republished message: see ARCHITECTURE.md.
const (
	HeaderCorrelationID  = "correlation-id"
	HeaderAttempt        = "x-attempt"
	HeaderScheduledDelay = "AMQ_SCHEDULED_DELAY"
	HeaderExpires        = "expires"
	HeaderPersistent     = "persistent"
	HeaderContentType    = "content-type"
)

// ErrClosed is returned by operations on a closed broker or subscription.
var ErrClosed = errors.New("broker: closed")

// ErrExpired is returned by Send for a message that would expire before its
// delay ends: it was not sent, and can never be delivered.
var ErrExpired = errors.New("broker: message expires before it is due")

// ErrRefused matches (errors.Is) the error of a Send the broker refused: it
// answered the SEND with an ERROR frame (no such queue and auto-create off,
// not authorised, address full with the FAIL policy, ...), or the message
// could not be sent at all (see validateMessage). Retrying at once gets the
// same answer; the broker was reachable.
var ErrRefused = errors.New("broker: refused")

// ErrFull matches (with ErrRefused) a refusal because the destination's
// address is full: Artemis's FAIL address-full policy (AMQ229102), or
// ActiveMQ Classic's sendFailIfNoSpace (ResourceAllocationException). It
// passes once consumers catch up; the same send may work later.
var ErrFull = errors.New("broker: address full")

// refusedError is a refusal: its text is the cause's, and it matches
// ErrRefused (and ErrFull when full).
type refusedError struct {
	err  error
	full bool
}

func (e refusedError) Error() string { return e.err.Error() }
func (e refusedError) Unwrap() error { return e.err }
func (e refusedError) Is(target error) bool {
	return target == ErrRefused || (e.full && target == ErrFull)
}

// refused marks err as a refusal (nil stays nil).
func refused(err error) error {
	if err == nil {
		return nil
	}
	return refusedError{err: err}
}

// ErrStaleDelivery is returned by Ack when the connection the message arrived on
// is gone; the broker redelivers the message, so the caller must not treat it as
// lost or as acknowledged.
var ErrStaleDelivery = errors.New("broker: delivery belongs to a dropped connection")

// Destination names a queue on an address. Artemis addresses it as the fully
// qualified queue name Address::Queue; ActiveMQ Classic and the embedded broker
// use that same string as a plain queue name.
type Destination struct {
	Address string
	Queue   string
}

// FQQN is the fully qualified queue name "address::queue".
func (d Destination) FQQN() string { return d.Address + "::" + d.Queue }

func (d Destination) String() string { return d.FQQN() }

// Message is what the service sends. Send always marks it persistent and waits
// for the broker to confirm it.
type Message struct {
	Destination Destination
	// Headers are application headers (event id, subscription id, ...); they come
	// back unchanged on delivery.
	Headers       map[string]string
	Body          []byte
	ContentType   string
	CorrelationID string
	// Attempt is the delivery attempt this copy is for, 1 for the first.
	Attempt int
	// Delay, when positive, asks the broker to deliver the message no earlier
	// than Delay after it was accepted (AMQ_SCHEDULED_DELAY, whole ms).
	Delay time.Duration
	// Expires is the absolute expiry; the zero time means never. A delay does
	// not move it.
	Expires time.Time
}

// Delivery is a message received from a subscription. It must be acked exactly
// once; an unacked delivery is redelivered after its consumer goes away.
//
// Its Message is what was sent, minus everything the broker added: Headers hold
// only application headers and Delay is always zero, so a retry is the Message
// with Attempt and Delay changed, sent again (never copy broker headers, see
// ARCHITECTURE.md). Expires is the value given to Send.
type Delivery struct {
	Message
	// ID is the broker's message id, for logs only.
	ID string
	// Redelivered is true when the broker says it delivered this message before.
	// It is a hint: Artemis may say false for a message whose earlier consumer
	// closed cleanly without acking it.
	Redelivered bool

	ack func(context.Context) error
}

// Ack acknowledges this one message (client-individual acknowledgement). A
// second Ack of the same delivery returns an error.
func (d *Delivery) Ack(ctx context.Context) error {
	if d.ack == nil {
		return errors.New("broker: delivery cannot be acked")
	}
	return d.ack(ctx)
}

// SubscribeOptions tune a subscription.
type SubscribeOptions struct {
	// Prefetch bounds how many unacked messages the broker pushes to this
	// consumer; 0 means the implementation's small default (8, or the STOMP
	// URL's prefetch option). Artemis counts in bytes: see consumerWindow;
	// larger messages leave room for fewer.
	Prefetch int
}

// Subscription delivers messages from one queue. Its channel survives
// reconnects: the implementation resubscribes and keeps feeding the same channel
// until Close, when the channel is closed.
type Subscription interface {
	C() <-chan *Delivery
	// Full reports whether the broker sends nothing more until a delivery is
	// acked: the subscription holds as many unacked messages as its prefetch
	// allows (on Artemis, as many bytes of them), so a reader who has taken
	// what C already offers will get no more. False when unsure.
	Full() bool
	Close() error
}

// Broker is what the service needs of a message broker.
type Broker interface {
	// Send stores msg durably and returns once the broker has confirmed it
	// (a STOMP receipt), or with an error when it cannot say so.
	Send(ctx context.Context, msg Message) error
	// Subscribe consumes dest with client-individual acknowledgement.
	Subscribe(ctx context.Context, dest Destination, opts SubscribeOptions) (Subscription, error)
	// EnsureQueue makes sure dest exists and is not removed while empty.
	EnsureQueue(ctx context.Context, dest Destination) error
	// DeleteQueue removes dest and its messages; a missing queue is no error.
	DeleteQueue(ctx context.Context, dest Destination) error
	// Connected reports whether the broker is reachable right now.
	Connected() bool
	// Prepare checks the broker's settings for the given addresses against the
	// delivery contract and adapts to what it may: it returns warnings for
	// settings the service works around, and an error matching
	// ErrMisconfigured, naming the setting, for one it cannot (the broker
	// would move or drop messages on its own). It needs the broker reachable.
	Prepare(ctx context.Context, addresses []string) (warnings []string, err error)
	Close() error
}

// ErrMisconfigured matches (errors.Is) the error of Prepare when a broker
// setting breaks the delivery contract.
var ErrMisconfigured = errors.New("broker: misconfigured")
