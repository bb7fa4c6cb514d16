package publish

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/roomhub/messaging-api/api"
	"github.com/roomhub/messaging-api/broker"
	"github.com/roomhub/messaging-api/message"
	"github.com/roomhub/messaging-api/subscriptions"
)

// routeSubs is a room's 100 ACTIVE subscriptions, all for the event's type,
// each with filter ("" for none).
func routeSubs(b *testing.B, eventTypeID uuid.UUID, filter string) []subscriptions.Subscription {
	b.Helper()
	var f *subscriptions.AttributeFilter
	if filter != "" {
		var probs api.Problems
		if f = subscriptions.ParseAttributeFilter(json.RawMessage(filter), &probs); probs.Len() > 0 {
			b.Fatal(probs.Err())
		}
	}
	subs := make([]subscriptions.Subscription, 100)
	for i := range subs {
		subs[i] = subscriptions.Subscription{
			ID: uuid.Must(uuid.NewV7()), Type: subscriptions.TypePush, Status: subscriptions.StatusActive,
			EventTypes:      []subscriptions.Filter{{EventTypeID: uuid.New()}, {EventTypeID: eventTypeID, Versions: []int{1, 2}}},
			AttributeFilter: f,
		}
	}
	return subs
}

// routeEvent has 8 attributes, which the "match" filter all but three name.
func routeEvent() message.Event {
	ev := message.Event{ID: uuid.Must(uuid.NewV7()), EventTypeID: uuid.New(), Version: 2, Attributes: map[string]string{
		"region": "us", "priority": "7", "source": "web-2", "traceId": "t", "tier": "gold",
	}}
	for i := range 3 {
		ev.Attributes[fmt.Sprintf("extra%d", i)] = "v"
	}
	return ev
}

// Filters of the routing benchmarks: one of every operator that the event
// passes (the whole filter is evaluated), and one it fails at its first key.
const (
	benchFilterMatch = `{"region":["eu","us"],"priority":[{"numeric":[">=",5]}],"source":[{"prefix":"web-"}],"traceId":[{"exists":true}],"tier":[{"anything-but":["free"]}]}`
	benchFilterMiss  = `{"priority":[{"numeric":["<",5]}],"region":["eu"]}`
)

// routeByType is the routing loop as it was before attribute filters (by
// event type and version only), the baseline of BenchmarkRoute.
func (s *Service) routeByType(ev *message.Event, subs []subscriptions.Subscription, now time.Time, sends []message.Send) []message.Send {
	for _, sub := range subs {
		if !sub.Matches(ev.EventTypeID, ev.Version) {
			continue
		}
		sends = append(sends, s.newSend(*ev, sub, now))
		ev.Destinations++
	}
	return sends
}

// BenchmarkRoute measures the routing step of a publish: choosing, among a
// room's 100 ACTIVE subscriptions, those that receive an event and making
// their sends; "by-type" is the step before attribute filters. The figures
// are in docs/benchmarks.md.
func BenchmarkRoute(b *testing.B) {
	s := &Service{pushQueue: broker.Destination{Address: "push", Queue: "push"}}
	now := time.Now()
	for _, bc := range []struct{ name, filter string }{
		{"by-type", ""}, {"no-filter", ""}, {"filter-match", benchFilterMatch}, {"filter-miss", benchFilterMiss},
	} {
		route := s.route
		if bc.name == "by-type" {
			route = s.routeByType
		}
		b.Run(bc.name, func(b *testing.B) {
			ev := routeEvent()
			subs := routeSubs(b, ev.EventTypeID, bc.filter)
			sends := make([]message.Send, 0, len(subs))
			b.ReportAllocs()
			for b.Loop() {
				ev.Destinations = 0
				sends = route(&ev, subs, now, sends[:0])
			}
			if ev.Destinations == 0 && bc.filter != benchFilterMiss {
				b.Fatal("no subscription took the event")
			}
		})
	}
}

// BenchmarkReceives measures the routing decision alone over the 100
// subscriptions: the event type filter only ("type-only", what routing
// checked before attribute filters) against the whole rule without and with
// filters.
func BenchmarkReceives(b *testing.B) {
	ev := routeEvent()
	for _, bc := range []struct {
		name, filter string
		attributes   bool
	}{
		{"type-only", "", false}, {"no-filter", "", true}, {"filter-match", benchFilterMatch, true}, {"filter-miss", benchFilterMiss, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			subs := routeSubs(b, ev.EventTypeID, bc.filter)
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				for i := range subs {
					if bc.attributes {
						if subs[i].Receives(ev.EventTypeID, ev.Version, ev.Attributes) {
							n++
						}
					} else if subs[i].Matches(ev.EventTypeID, ev.Version) {
						n++
					}
				}
			}
			if n == 0 && bc.filter != benchFilterMiss {
				b.Fatal("no subscription took the event")
			}
		})
	}
}
