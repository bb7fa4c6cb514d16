package publish

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/roomhub/messaging-api/api"
	"github.com/roomhub/messaging-api/auth"
	"github.com/roomhub/messaging-api/message"
)

// Routes registers the publish and message-log endpoints under g (/v1).
func Routes(g *echo.Group, s *Service) {
	h := handlers{s: s}
	// Publishers publish (the event types are checked on the body); the
	// message log is the room manager's.
	publishers := auth.InRoom(api.RolePublisher)
	managers := auth.InRoom(api.RoleManager)
	auth.Handle(g, http.MethodPost, "/rooms/:roomId/messages", h.publish, publishers)
	auth.Handle(g, http.MethodPost, "/rooms/:roomId/messages\\:batch", h.publishBatch, publishers)
	auth.Handle(g, http.MethodGet, "/rooms/:roomId/messages", h.list, managers)
	auth.Handle(g, http.MethodGet, "/rooms/:roomId/messages/:eventId", h.get, managers)
}

type handlers struct{ s *Service }

// PublishResponse is the answer to a publish, one per message of a batch.
type PublishResponse struct {
	EventID          string     `json:"eventId"`
	CorrelationID    string     `json:"correlationId"`
	EventType        string     `json:"eventType"`
	EventTypeVersion int        `json:"eventTypeVersion"`
	Destinations     int        `json:"destinations"`
	PublishedAt      time.Time  `json:"publishedAt"`
	ExpiresAt        *time.Time `json:"expiresAt"`
	Traceparent      string     `json:"traceparent,omitempty"`
}

func toPublishResponse(e message.Event) PublishResponse {
	return PublishResponse{
		EventID: e.ID.String(), CorrelationID: e.CorrelationID, EventType: e.EventType,
		EventTypeVersion: e.Version, Destinations: e.Destinations, PublishedAt: e.PublishedAt,
		ExpiresAt: optTime(e.ExpiresAt), Traceparent: e.Trace.Parent,
	}
}

func optTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// correlationHeader applies X-Correlation-ID to an input without its own.
func correlationHeader(c echo.Context, in *Input, field string) error {
	h := c.Request().Header.Get("X-Correlation-ID")
	switch {
	case h == "":
	case in.CorrelationID == "":
		in.CorrelationID = h
	case in.CorrelationID != h:
		return api.Invalid(field, "differs from the X-Correlation-ID header; send one or make them equal")
	}
	return nil
}

func (h handlers) publish(c echo.Context) error {
	var in Input
	if err := api.Decode(c, &in); err != nil {
		return err
	}
	if err := correlationHeader(c, &in, "correlationId"); err != nil {
		return err
	}
	in.Trace = requestTrace(c)
	res, err := h.s.Publish(c.Request().Context(), c.Param("roomId"), []Input{in}, c.Request().Header.Get("Idempotency-Key"), false)
	if err != nil {
		return err
	}
	if res[0].Replayed {
		c.Response().Header().Set("Idempotent-Replayed", "true")
	}
	c.Response().Header().Set(echo.HeaderLocation, fmt.Sprintf("/v1/rooms/%s/messages/%s", res[0].Event.RoomID, res[0].Event.ID))
	return c.JSON(http.StatusAccepted, toPublishResponse(res[0].Event))
}

type batchRequest struct {
	Messages []Input `json:"messages"`
}

func (h handlers) publishBatch(c echo.Context) error {
	var req batchRequest
	if err := api.Decode(c, &req); err != nil {
		return err
	}
	if len(req.Messages) == 0 || len(req.Messages) > MaxBatch {
		return api.Invalid("messages", fmt.Sprintf("must hold 1 to %d messages", MaxBatch))
	}
	trace := requestTrace(c)
	for i := range req.Messages {
		if err := correlationHeader(c, &req.Messages[i], fmt.Sprintf("messages[%d].correlationId", i)); err != nil {
			return err
		}
		req.Messages[i].Trace = trace
	}
	res, err := h.s.Publish(c.Request().Context(), c.Param("roomId"), req.Messages, c.Request().Header.Get("Idempotency-Key"), true)
	if err != nil {
		return err
	}
	out := api.List[PublishResponse]{Items: make([]PublishResponse, len(res))}
	for i, r := range res {
		out.Items[i] = toPublishResponse(r.Event)
	}
	if len(res) > 0 && res[0].Replayed {
		c.Response().Header().Set("Idempotent-Replayed", "true")
	}
	return c.JSON(http.StatusAccepted, out)
}

// AttemptResponse is one attempt of a delivery in the message log.
type AttemptResponse struct {
	ID             string         `json:"id"`
	Attempt        int            `json:"attempt"`
	ScheduledDelay int64          `json:"scheduledDelay"`
	CreatedAt      time.Time      `json:"createdAt"`
	SentAt         *time.Time     `json:"sentAt"`
	Status         message.Status `json:"status"`
	StatusCode     *int           `json:"statusCode"`
	Latency        *int64         `json:"latency,omitempty"`
	Error          string         `json:"error,omitempty"`
	// RequestStartedAt is when the push request began (completedAt less the
	// latency): after sentAt by the scheduled delay, before completedAt.
	RequestStartedAt *time.Time `json:"requestStartedAt,omitempty"`
	CompletedAt      *time.Time `json:"completedAt"`
}

// DeliveryResponse is what one subscription got of an event in the message log.
type DeliveryResponse struct {
	SubscriptionID   string            `json:"subscriptionId"`
	SubscriptionType string            `json:"subscriptionType"`
	Destination      string            `json:"destination"`
	Attempts         []AttemptResponse `json:"attempts"`
}

// EventResponse is an event of the message log with its deliveries.
type EventResponse struct {
	EventID          string             `json:"eventId"`
	RoomID           string             `json:"roomId"`
	CorrelationID    string             `json:"correlationId"`
	EventType        string             `json:"eventType"`
	EventTypeVersion int                `json:"eventTypeVersion"`
	Payload          json.RawMessage    `json:"payload"`
	Attributes       map[string]string  `json:"attributes"`
	Destinations     int                `json:"destinations"`
	PublishedAt      time.Time          `json:"publishedAt"`
	ExpiresAt        *time.Time         `json:"expiresAt"`
	Traceparent      string             `json:"traceparent,omitempty"`
	Tracestate       string             `json:"tracestate,omitempty"`
	Deliveries       []DeliveryResponse `json:"deliveries"`
}

// toEventResponse groups the sends of e by subscription, each in attempt order.
func toEventResponse(e message.Event, sends []message.Send) EventResponse {
	r := EventResponse{
		EventID: e.ID.String(), RoomID: e.RoomID.String(), CorrelationID: e.CorrelationID,
		EventType: e.EventType, EventTypeVersion: e.Version, Payload: e.Payload, Attributes: e.Attributes,
		Destinations: e.Destinations, PublishedAt: e.PublishedAt, ExpiresAt: optTime(e.ExpiresAt),
		Traceparent: e.Trace.Parent, Tracestate: e.Trace.State,
		Deliveries: []DeliveryResponse{},
	}
	if r.Attributes == nil {
		r.Attributes = map[string]string{}
	}
	index := map[uuid.UUID]int{}
	for _, s := range sends {
		i, ok := index[s.SubscriptionID]
		if !ok {
			i = len(r.Deliveries)
			index[s.SubscriptionID] = i
			r.Deliveries = append(r.Deliveries, DeliveryResponse{
				SubscriptionID: s.SubscriptionID.String(), SubscriptionType: s.SubscriptionType, Destination: s.Destination,
			})
		}
		var code *int
		if s.StatusCode != 0 {
			v := s.StatusCode
			code = &v
		}
		var latency *int64
		if s.Latency > 0 || s.StatusCode != 0 {
			ms := s.Latency.Milliseconds()
			latency = &ms
		}
		r.Deliveries[i].Attempts = append(r.Deliveries[i].Attempts, AttemptResponse{
			ID: s.ID.String(), Attempt: s.Attempt, ScheduledDelay: s.ScheduledDelay.Milliseconds(),
			CreatedAt: s.CreatedAt, SentAt: optTime(s.SentAt), Status: s.Status, StatusCode: code,
			Latency: latency, Error: s.Error, CompletedAt: optTime(s.CompletedAt),
			RequestStartedAt: message.RequestStartedAt(s.CompletedAt, s.Latency, s.StatusCode),
		})
	}
	return r
}

func (h handlers) get(c echo.Context) error {
	ev, sends, err := h.s.Event(c.Request().Context(), c.Param("roomId"), c.Param("eventId"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, toEventResponse(ev, sends))
}

func (h handlers) list(c echo.Context) error {
	page, err := api.ParsePage(c, 50, 200)
	if err != nil {
		return err
	}
	evs, sends, err := h.s.Events(c.Request().Context(), c.Param("roomId"), c.QueryParam("correlationId"), page)
	if err != nil {
		return err
	}
	out := api.List[EventResponse]{Items: make([]EventResponse, len(evs))}
	for i, e := range evs {
		out.Items[i] = toEventResponse(e, sends[e.ID])
	}
	if len(evs) == page.Limit {
		out.NextCursor = api.EncodeCursor(evs[len(evs)-1].ID.String())
	}
	return c.JSON(http.StatusOK, out)
}

// requestTrace is the trace context of a publish request. Two traceparent
// headers are as invalid as a malformed one: a new trace starts.
func requestTrace(c echo.Context) message.Trace {
	h := c.Request().Header
	tp := h.Values(message.HeaderTraceparent)
	if len(tp) != 1 {
		tp = []string{""}
	}
	return message.TraceFrom(tp[0], h.Values(message.HeaderTracestate), rand.Uint64)
}
