package apptest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/roomhub/messaging-api/client"
	"github.com/roomhub/messaging-api/publish"
	"github.com/roomhub/messaging-api/pull"
)

// The helpers of this file drive PULL subscriptions through a service a test
// started (StartService, StartProcess): a room with event type "tick", its
// subscriptions, publishing, pulling, acking, and the delivery log and dead
// letters of a subscription.

// UniqueRoom returns a room identifier no other test (nor an earlier run
// against the shared PostgreSQL and broker) uses.
func UniqueRoom(prefix string) string {
	return fmt.Sprintf("%s-%d", prefix, time.Now().UnixNano())
}

// PullSub is a PULL subscription a test created.
type PullSub struct{ Sub }

// SetupPull creates room with roomFields (JSON members such as
// `"deliveryDelay":200`), event type "tick" with version 1, which takes any
// JSON, and a PULL subscription to it with subFields (such as
// `"ackDeadline":1000`).
func (c Client) SetupPull(room, roomFields, subFields string) PullSub {
	c.T.Helper()
	c.createRoom(room, roomFields)
	c.createEventType(room, "tick")
	return c.AddPullSub(room, subFields)
}

// AddPullSub creates another PULL subscription to "tick" in room, with
// subFields as SetupPull.
func (c Client) AddPullSub(room, subFields string) PullSub {
	c.T.Helper()
	if subFields != "" {
		subFields = "," + subFields
	}
	r, err := c.API().CreateSubscriptionWithBodyWithResponse(c.T.Context(), room, "application/json",
		strings.NewReader(`{"type":"PULL","eventTypes":[{"eventType":"tick"}]`+subFields+`}`))
	sub := Must(c.T, r, err, r.JSON201)
	return PullSub{Sub{C: c, Room: room, ID: sub.Id.String()}}
}

// Tick is the answer to a publish of PublishTick, with the payload sent.
type Tick struct {
	publish.PublishResponse
	Payload string
}

// PublishTick publishes a "tick" with payload {"n":n} and the one attribute
// seq=n.
func (c Client) PublishTick(room string, n int) Tick {
	c.T.Helper()
	p := Tick{Payload: fmt.Sprintf(`{"n":%d}`, n)}
	r, err := c.API().PublishMessageWithResponse(c.T.Context(), room, nil, client.MessageInput{
		EventType: "tick", Payload: json.RawMessage(p.Payload), Attributes: &map[string]string{"seq": strconv.Itoa(n)},
	})
	Must(c.T, r, err, r.JSON202)
	p.PublishResponse = Decode[publish.PublishResponse](c.T, Response{Body: r.Body})
	return p
}

// Pull makes one pull request, waiting up to waitMs for the first message.
func (s PullSub) Pull(maxMessages, waitMs int) []pull.Message {
	s.C.T.Helper()
	var out pull.MessagesResponse
	s.C.CallJSON("POST", s.Path()+"/pull", fmt.Sprintf(`{"maxMessages":%d,"waitMs":%d}`, maxMessages, waitMs), http.StatusOK, &out)
	if out.Messages == nil {
		s.C.T.Fatal("pull answered without a messages array")
	}
	return out.Messages
}

// PullN pulls until n messages came, failing after within.
func (s PullSub) PullN(n int, within time.Duration) []pull.Message {
	s.C.T.Helper()
	var got []pull.Message
	deadline := time.Now().Add(within)
	for len(got) < n {
		left := time.Until(deadline)
		if left <= 0 {
			s.C.T.Fatalf("pulled %d messages within %v, want %d", len(got), within, n)
		}
		got = append(got, s.Pull(min(n-len(got), pull.MaxMessages), int(min(left, pull.MaxWait).Milliseconds()))...)
	}
	if len(got) != n {
		s.C.T.Fatalf("pulled %d messages, want %d", len(got), n)
	}
	return got
}

// PullNone fails if a pull waiting up to waitMs gets anything.
func (s PullSub) PullNone(waitMs int) {
	s.C.T.Helper()
	if ms := s.Pull(pull.MaxMessages, waitMs); len(ms) != 0 {
		s.C.T.Fatalf("pulled %d messages, want none: %+v", len(ms), ms)
	}
}

// Settle acks or nacks (op "ack" or "nack") ids and returns the result of
// each.
func (s PullSub) Settle(op string, ids ...string) []pull.Result {
	s.C.T.Helper()
	body, err := json.Marshal(map[string][]string{"ackIds": ids})
	if err != nil {
		s.C.T.Fatal(err)
	}
	var out pull.ResultsResponse
	s.C.CallJSON("POST", s.Path()+"/"+op, string(body), http.StatusOK, &out)
	return out.Results
}

// Ack acks ids and returns the result of each.
func (s PullSub) Ack(ids ...string) []pull.Result { return s.Settle("ack", ids...) }
