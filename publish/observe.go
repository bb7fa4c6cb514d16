package publish

import (
	"strings"

	"github.com/roomhub/messaging-api/message"
	"github.com/roomhub/messaging-api/rooms"
)

// Observer is told of accepted publishes (metrics.Metrics is one).
type Observer interface {
	// Published counts events accepted for room (its identifier) and the
	// first copies they owe, by subscription type ("push", "pull").
	Published(room string, events int, sends map[string]int)
}

// RelayObserver is told what the relay did with outbox rows.
type RelayObserver interface {
	// Relayed counts n rows: result is sent, failed (no broker: released),
	// refused (to be tried again later) or given_up (see Refusal).
	Relayed(result string, n int)
}

type nopObserver struct{}

func (nopObserver) Published(string, int, map[string]int) {}
func (nopObserver) Relayed(string, int)                   {}

// Observe makes o see every publish; call it before serving.
func (s *Service) Observe(o Observer) *Service {
	s.obs = o
	return s
}

func (s *Service) observe(room rooms.Room, events []message.Event, sends []message.Send) {
	if len(events) == 0 {
		return
	}
	by := map[string]int{}
	for _, sd := range sends {
		by[strings.ToLower(sd.SubscriptionType)]++
	}
	s.obs.Published(room.Identifier, len(events), by)
}
