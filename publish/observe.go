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

type nopObserver struct{}

func (nopObserver) Published(string, int, map[string]int) {}

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
