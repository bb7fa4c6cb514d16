// Package delivery is the model of what becomes of each copy of an event:
// the attempts the push dispatcher and pulls record, the settlement that one
// outcome writes, and the dead letters of copies that will not be
// delivered. The features that deliver (push, pull) and the store share it.
// It also serves what users do with the outcomes (Service): list, replay
// (as new events, from attempt 1, through the outbox) and delete a
// subscription's dead letters, and list its deliveries.
package delivery

import (
	"time"

	"github.com/google/uuid"

	"github.com/roomhub/messaging-api/message"
)

// StatusDeferred marks a send that was re-queued without an attempt: its
// subscription was PAUSED, or had too many messages waiting in memory.
const StatusDeferred message.Status = "deferred"

// Dead-letter reasons.
const (
	ReasonExhausted = "attempts_exhausted"
	ReasonPermanent = "permanent_failure"
	ReasonExpired   = "expired"
	// ReasonBrokerRefused: the outbox relay gave up a copy the broker kept
	// refusing.
	ReasonBrokerRefused = "broker_refused"
)

// Outcomes of one handling of a message, as observers see them.
const (
	OutcomeDelivered    = "delivered"
	OutcomeRetried      = "retried"
	OutcomeDeadLettered = "dead_lettered" // attempts exhausted
	OutcomeExpired      = "expired"
	OutcomeRefused      = "refused" // a permanent failure: dead-lettered at once
	OutcomeDropped      = "dropped" // the subscription is gone
)

// Attempt is the stored outcome of one send.
type Attempt struct {
	Status        message.Status
	StatusCode    int
	Latency       time.Duration
	Body          string
	Error         string
	At            time.Time
	NextAttemptAt time.Time
}

// DeadLetter is a message that will not be delivered by itself.
type DeadLetter struct {
	ID             uuid.UUID
	RoomID         uuid.UUID
	SubscriptionID uuid.UUID
	Event          message.Event
	Attempts       int
	Reason         string
	LastStatusCode int
	LastError      string
	CreatedAt      time.Time
}

// Settlement is everything one message's outcome writes, in one transaction.
type Settlement struct {
	SendID     uuid.UUID // the row of the copy just handled; uuid.Nil if unknown
	Attempt    Attempt
	DeadLetter *DeadLetter
	// Resend is the next copy, stored claimed by Owner until Until so that
	// the outbox relay sends it only if this process does not.
	Resend *message.Send
	Owner  string
	Until  time.Time
}
