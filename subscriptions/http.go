package subscriptions

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/roomhub/messaging-api/api"
	"github.com/roomhub/messaging-api/auth"
	"github.com/roomhub/messaging-api/rooms"
)

// Routes registers the subscription endpoints under g (/v1).
func Routes(g *echo.Group, s *Service) {
	h := handlers{s: s}
	// Subscribers create, list and change their own; managers all of the
	// room's.
	room := auth.InRoom(api.RoleManager, api.RoleSubscriber)
	one := auth.InSubscription(api.RoleManager, api.RoleSubscriber)
	auth.Handle(g, http.MethodPost, "/rooms/:roomId/subscriptions", h.create, room)
	auth.Handle(g, http.MethodGet, "/rooms/:roomId/subscriptions", h.list, room)
	auth.Handle(g, http.MethodGet, "/rooms/:roomId/subscriptions/:subscriptionId", h.get, one)
	auth.Handle(g, http.MethodPatch, "/rooms/:roomId/subscriptions/:subscriptionId", h.update, one)
	auth.Handle(g, http.MethodDelete, "/rooms/:roomId/subscriptions/:subscriptionId", h.delete, one)
	auth.Handle(g, http.MethodPost, "/rooms/:roomId/subscriptions/:subscriptionId/secret\\:rotate", h.rotate, one)
	// Custom methods, POST …/{subscriptionId}:verb: a test event is for
	// whoever uses the subscription; approving or rejecting it, for the
	// room's manager.
	decide := auth.InRoom(api.RoleManager)
	auth.HandleVerbs(g, "/rooms/:roomId/subscriptions/:subscriptionId", "subscriptionId",
		auth.Verb{Name: "approve", Handler: h.approve, Rule: decide},
		auth.Verb{Name: "reject", Handler: h.reject, Rule: decide},
		auth.Verb{Name: "test", Handler: h.test, Rule: one},
	)
	auth.Handle(g, http.MethodPost, "/rooms/:roomId/subscriptions/:subscriptionId/circuit\\:reset", h.resetCircuit, one)
}

type handlers struct{ s *Service }

type request struct {
	Type                    api.Nullable[Type]                 `json:"type"`
	PushURL                 api.Nullable[string]               `json:"pushUrl"`
	PushAuth                api.Nullable[PushAuthInput]        `json:"pushAuth"`
	EventTypes              api.Nullable[[]FilterInput]        `json:"eventTypes"`
	AttributeFilter         api.Nullable[json.RawMessage]      `json:"attributeFilter"`
	DeliveryDelay           api.Nullable[int64]                `json:"deliveryDelay"`
	DeliveryDelayMultiplier api.Nullable[float64]              `json:"deliveryDelayMultiplier"`
	DeliveryAttempts        api.Nullable[int]                  `json:"deliveryAttempts"`
	MaxDeliveryDelay        api.Nullable[int64]                `json:"maxDeliveryDelay"`
	DeliveryJitter          api.Nullable[float64]              `json:"deliveryJitter"`
	RetryPolicy             api.Nullable[rooms.RetryPolicy]    `json:"retryPolicy"`
	CircuitBreaker          api.Nullable[rooms.CircuitBreaker] `json:"circuitBreaker"`
	MaxDeliveryRate         api.Nullable[float64]              `json:"maxDeliveryRate"`
	AckDeadline             api.Nullable[int64]                `json:"ackDeadline"`
	Status                  api.Nullable[Status]               `json:"status"`
	Owner                   api.Nullable[string]               `json:"owner"`
}

// Response is a subscription as the API shows it.
type Response struct {
	ID                      string                `json:"id"`
	RoomID                  string                `json:"roomId"`
	Type                    Type                  `json:"type"`
	PushURL                 *string               `json:"pushUrl"`
	PushAuth                *PushAuthResponse     `json:"pushAuth"`
	Destination             *string               `json:"destination"`
	EventTypes              []FilterInput         `json:"eventTypes"`
	AttributeFilter         json.RawMessage       `json:"attributeFilter"`
	DeliveryDelay           *int64                `json:"deliveryDelay"`
	DeliveryDelayMultiplier *float64              `json:"deliveryDelayMultiplier"`
	DeliveryAttempts        *int                  `json:"deliveryAttempts"`
	MaxDeliveryDelay        *int64                `json:"maxDeliveryDelay"`
	DeliveryJitter          *float64              `json:"deliveryJitter"`
	RetryPolicy             *rooms.RetryPolicy    `json:"retryPolicy"`
	CircuitBreaker          *rooms.CircuitBreaker `json:"circuitBreaker"`
	MaxDeliveryRate         *float64              `json:"maxDeliveryRate"`
	Circuit                 *CircuitResponse      `json:"circuit"`
	AckDeadline             int64                 `json:"ackDeadline"`
	Status                  Status                `json:"status"`
	// DecidedBy, DecidedAt and RejectionReason say who approved or
	// rejected a subscription that was PENDING, when, and why a rejection.
	DecidedBy       *string    `json:"decidedBy"`
	DecidedAt       *time.Time `json:"decidedAt"`
	RejectionReason *string    `json:"rejectionReason"`
	Owner           *string    `json:"owner"`
	// SigningSecret is shown only when it is made: at creation and rotation.
	SigningSecret string    `json:"signingSecret,omitempty"`
	CreatedAt     time.Time `json:"createdAt"`
	UpdatedAt     time.Time `json:"updatedAt"`
}

// PushAuthResponse is a PUSH subscription's pushAuth as the API shows it:
// its type and what is not secret (the username of basic, the header names
// of headers); the password, token and header values are never shown.
type PushAuthResponse struct {
	Type        AuthType `json:"type"`
	Username    string   `json:"username,omitempty"`
	HeaderNames []string `json:"headerNames,omitempty"`
	// Configured is always true: the secret is set, though not shown.
	Configured bool `json:"configured"`
}

func toPushAuthResponse(a *PushAuth) *PushAuthResponse {
	if a == nil {
		return nil
	}
	return &PushAuthResponse{Type: a.Type, Username: a.Username, HeaderNames: a.HeaderNames(), Configured: true}
}

func toResponse(s Subscription) Response {
	r := Response{
		ID:                      s.ID.String(),
		RoomID:                  s.RoomID.String(),
		Type:                    s.Type,
		PushAuth:                toPushAuthResponse(s.PushAuth),
		EventTypes:              make([]FilterInput, len(s.EventTypes)),
		DeliveryDelay:           s.DeliveryDelay,
		DeliveryDelayMultiplier: s.DeliveryDelayMultiplier,
		DeliveryAttempts:        s.DeliveryAttempts,
		MaxDeliveryDelay:        s.MaxDeliveryDelay,
		DeliveryJitter:          s.DeliveryJitter,
		RetryPolicy:             s.RetryPolicy,
		CircuitBreaker:          s.CircuitBreaker,
		MaxDeliveryRate:         s.MaxDeliveryRate,
		AckDeadline:             s.AckDeadline.Milliseconds(),
		Status:                  s.Status,
		CreatedAt:               s.CreatedAt,
		UpdatedAt:               s.UpdatedAt,
	}
	r.Owner = optional(s.Owner)
	if s.AttributeFilter != nil {
		r.AttributeFilter = json.RawMessage(s.AttributeFilter.Text())
	}
	if !s.DecidedAt.IsZero() {
		at := s.DecidedAt
		r.DecidedAt, r.DecidedBy = &at, optional(s.DecidedBy)
	}
	r.RejectionReason = optional(s.RejectionReason)
	for i, f := range s.EventTypes {
		r.EventTypes[i] = FilterInput{EventType: f.EventType, Versions: f.Versions}
	}
	if s.Type == TypePush {
		u := s.PushURL
		r.PushURL = &u
		r.Circuit = toCircuitResponse(s.Circuit)
	} else {
		d := s.Queue().FQQN()
		r.Destination = &d
	}
	return r
}

// optional is nil for "".
func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func (h handlers) create(c echo.Context) error {
	var req request
	if err := api.Decode(c, &req); err != nil {
		return err
	}
	s, err := h.s.Create(c.Request().Context(), c.Param("roomId"), Patch(req))
	if err != nil {
		return err
	}
	c.Response().Header().Set(echo.HeaderLocation, "/v1/rooms/"+s.RoomID.String()+"/subscriptions/"+s.ID.String())
	r := toResponse(s)
	r.SigningSecret = s.SigningSecret
	noStore(c)
	return c.JSON(http.StatusCreated, r)
}

func (h handlers) list(c echo.Context) error {
	page, err := api.ParsePage(c, 50, 500)
	if err != nil {
		return err
	}
	var probs api.Problems
	q := Query{Type: Type(c.QueryParam("type")), Status: Status(c.QueryParam("status"))}
	if q.Type != "" && !q.Type.valid() {
		probs.Add("type", "must be PUSH or PULL")
	}
	if q.Status != "" && !q.Status.valid() {
		probs.Add("status", "must be ACTIVE, PAUSED, TERMINATED, PENDING or REJECTED")
	}
	if err := probs.Err(); err != nil {
		return err
	}
	subs, err := h.s.List(c.Request().Context(), c.Param("roomId"), q, page)
	if err != nil {
		return err
	}
	out := api.List[Response]{Items: make([]Response, len(subs))}
	for i, s := range subs {
		out.Items[i] = toResponse(s)
	}
	if len(subs) == page.Limit {
		out.NextCursor = api.EncodeCursor(subs[len(subs)-1].ID.String())
	}
	return c.JSON(http.StatusOK, out)
}

func (h handlers) get(c echo.Context) error {
	_, s, err := h.s.Get(c.Request().Context(), c.Param("roomId"), c.Param("subscriptionId"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, toResponse(s))
}

func (h handlers) update(c echo.Context) error {
	var req request
	if err := api.Decode(c, &req); err != nil {
		return err
	}
	s, err := h.s.Update(c.Request().Context(), c.Param("roomId"), c.Param("subscriptionId"), Patch(req))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, toResponse(s))
}

func (h handlers) delete(c echo.Context) error {
	if err := h.s.Delete(c.Request().Context(), c.Param("roomId"), c.Param("subscriptionId")); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

type rotateRequest struct {
	GracePeriod *int64 `json:"gracePeriod"` // ms the old secret keeps signing
}

func (h handlers) rotate(c echo.Context) error {
	var req rotateRequest
	if err := api.DecodeOptional(c, &req); err != nil {
		return err
	}
	grace := DefaultRotationGrace
	if req.GracePeriod != nil {
		if ms := *req.GracePeriod; ms < 0 || ms > MaxRotationGrace.Milliseconds() {
			return api.Invalid("gracePeriod", fmt.Sprintf("must be from 0 to %d ms", MaxRotationGrace.Milliseconds()))
		}
		grace = time.Duration(*req.GracePeriod) * time.Millisecond
	}
	s, err := h.s.RotateSecret(c.Request().Context(), c.Param("roomId"), c.Param("subscriptionId"), grace)
	if err != nil {
		return err
	}
	r := toResponse(s)
	r.SigningSecret = s.SigningSecret
	noStore(c)
	return c.JSON(http.StatusOK, r)
}

// TestResponse is the answer to POST …:test: the test event sent and what
// came of it.
type TestResponse struct {
	EventID   string    `json:"eventId"`
	EventType string    `json:"eventType"`
	SentAt    time.Time `json:"sentAt"`
	// Outcome is what a real push would make of the answer: delivered,
	// retryable or permanent.
	Outcome      string  `json:"outcome"`
	StatusCode   *int    `json:"statusCode"`
	Latency      int64   `json:"latency"`
	ResponseBody string  `json:"responseBody"`
	Error        *string `json:"error"`
}

func (h handlers) test(c echo.Context) error {
	ev, res, err := h.s.Test(c.Request().Context(), c.Param("roomId"), c.Param("subscriptionId"))
	if err != nil {
		return err
	}
	r := TestResponse{
		EventID: ev.ID.String(), EventType: TestEventType, SentAt: ev.SentAt, Outcome: res.Outcome,
		Latency: res.Latency.Milliseconds(), ResponseBody: res.Body,
	}
	if res.StatusCode != 0 {
		r.StatusCode = &res.StatusCode
	}
	if res.Error != "" {
		r.Error = &res.Error
	}
	return c.JSON(http.StatusOK, r)
}

type rejectRequest struct {
	Reason string `json:"reason"`
}

// approve answers POST …/subscriptions/{id}:approve.
func (h handlers) approve(c echo.Context) error {
	if err := api.DecodeOptional(c, &struct{}{}); err != nil {
		return err
	}
	s, err := h.s.Approve(c.Request().Context(), c.Param("roomId"), c.Param("subscriptionId"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, toResponse(s))
}

// reject answers POST …/subscriptions/{id}:reject.
func (h handlers) reject(c echo.Context) error {
	var req rejectRequest
	if err := api.Decode(c, &req); err != nil {
		return err
	}
	s, err := h.s.Reject(c.Request().Context(), c.Param("roomId"), c.Param("subscriptionId"), req.Reason)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, toResponse(s))
}

// CircuitResponse is where a PUSH subscription's circuit breaker stands.
type CircuitResponse struct {
	State          CircuitState `json:"state"`
	OpenedAt       *time.Time   `json:"openedAt"`
	LastError      *string      `json:"lastError"`
	LastStatusCode *int         `json:"lastStatusCode"`
	Cooldown       *int64       `json:"cooldown"`
	NextProbeAt    *time.Time   `json:"nextProbeAt"`
}

func toCircuitResponse(c Circuit) *CircuitResponse {
	if c.Closed() {
		return &CircuitResponse{State: CircuitClosed}
	}
	opened, why, cooldown := c.OpenedAt, c.LastError, c.Cooldown.Milliseconds()
	r := &CircuitResponse{State: c.State, OpenedAt: &opened, LastError: &why, Cooldown: &cooldown}
	if c.LastStatusCode != 0 {
		code := c.LastStatusCode
		r.LastStatusCode = &code
	}
	if c.State == CircuitOpen {
		at := c.ProbeAt
		r.NextProbeAt = &at
	}
	return r
}

func (h handlers) resetCircuit(c echo.Context) error {
	s, err := h.s.ResetCircuit(c.Request().Context(), c.Param("roomId"), c.Param("subscriptionId"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, toResponse(s))
}

// noStore keeps an answer that carries a signing secret out of every cache
// (a PULL subscription's create answer has none, but is marked alike).
func noStore(c echo.Context) {
	c.Response().Header().Set(echo.HeaderCacheControl, "no-store")
}
