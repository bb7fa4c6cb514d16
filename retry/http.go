package retry

import (
	"context"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/roomhub/messaging-api/api"
	"github.com/roomhub/messaging-api/auth"
	"github.com/roomhub/messaging-api/rooms"
	"github.com/roomhub/messaging-api/subscriptions"
)

// Subscriptions finds a subscription with its room (subscriptions.Service is one).
type Subscriptions interface {
	Get(ctx context.Context, roomRef, id string) (rooms.Room, subscriptions.Subscription, error)
}

// Routes registers the retry-schedule endpoints under g (/v1).
func Routes(g *echo.Group, subs Subscriptions) {
	auth.Handle(g, http.MethodGet, "/rooms/:roomId/subscriptions/:subscriptionId/retry-schedule", func(c echo.Context) error {
		room, sub, err := subs.Get(c.Request().Context(), c.Param("roomId"), c.Param("subscriptionId"))
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, describe(TargetOf(room, sub)))
	}, auth.InSubscription(api.RoleManager, api.RoleSubscriber))
	auth.Handle(g, http.MethodPost, "/retry-schedule\\:preview", preview,
		auth.Anywhere(api.RoleManager, api.RolePublisher, api.RoleSubscriber))
}

// previewRequest holds a room's delivery settings, as on a room.
type previewRequest struct {
	DeliveryDelay           api.Nullable[int64]             `json:"deliveryDelay"`
	DeliveryDelayMultiplier api.Nullable[float64]           `json:"deliveryDelayMultiplier"`
	DeliveryAttempts        api.Nullable[int]               `json:"deliveryAttempts"`
	MaxDeliveryDelay        api.Nullable[int64]             `json:"maxDeliveryDelay"`
	DeliveryJitter          api.Nullable[float64]           `json:"deliveryJitter"`
	RetryPolicy             api.Nullable[rooms.RetryPolicy] `json:"retryPolicy"`
}

func preview(c echo.Context) error {
	var req previewRequest
	if err := api.DecodeOptional(c, &req); err != nil {
		return err
	}
	room := rooms.NewRoomDefaults()
	patch := rooms.DeliveryPatch{
		DeliveryDelay: req.DeliveryDelay, DeliveryDelayMultiplier: req.DeliveryDelayMultiplier,
		DeliveryAttempts: req.DeliveryAttempts, MaxDeliveryDelay: req.MaxDeliveryDelay,
		DeliveryJitter: req.DeliveryJitter, RetryPolicy: req.RetryPolicy,
	}
	if err := patch.ApplyTo(&room); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, describe(Target{Room: room}))
}

// PolicyResponse is the retry policy a schedule follows, and where it comes from.
type PolicyResponse struct {
	Kind   string `json:"kind"` // exponential or fourPhase
	Source string `json:"source"`
	// The exponential backoff retry's settings.
	DeliveryDelay           *int64   `json:"deliveryDelay,omitempty"`
	DeliveryDelayMultiplier *float64 `json:"deliveryDelayMultiplier,omitempty"`
	DeliveryAttempts        *int     `json:"deliveryAttempts,omitempty"`
	MaxDeliveryDelay        *int64   `json:"maxDeliveryDelay,omitempty"`
	DeliveryJitter          *float64 `json:"deliveryJitter,omitempty"`
	// The four-phase policy's settings, defaults filled in.
	RetryPolicy *rooms.Resolved `json:"retryPolicy,omitempty"`
}

// AttemptResponse is one retry of a schedule: its delay and, with jitter, its range.
type AttemptResponse struct {
	Attempt              int     `json:"attempt"`
	Phase                string  `json:"phase"`
	Delay                int64   `json:"delay"`
	DelayMin             int64   `json:"delayMin"`
	DelayMax             int64   `json:"delayMax"`
	Jitter               float64 `json:"jitter"`
	SinceFirstAttempt    int64   `json:"sinceFirstAttempt"`
	SinceFirstAttemptMin int64   `json:"sinceFirstAttemptMin"`
	SinceFirstAttemptMax int64   `json:"sinceFirstAttemptMax"`
}

// ScheduleResponse is a retry-schedule answer.
type ScheduleResponse struct {
	Policy      PolicyResponse    `json:"policy"`
	MaxAttempts int               `json:"maxAttempts"`
	Attempts    []AttemptResponse `json:"attempts"`
}

func describe(t Target) ScheduleResponse {
	p, source := Effective(t)
	out := ScheduleResponse{MaxAttempts: p.MaxAttempts(), Attempts: []AttemptResponse{}}
	switch p := p.(type) {
	case Exponential:
		maxDelay := p.MaxDelay
		if maxDelay <= 0 {
			maxDelay = DefaultMaxDelay
		}
		out.Policy = PolicyResponse{
			Kind: "exponential", Source: source,
			DeliveryDelay: ptr(p.Delay.Milliseconds()), DeliveryDelayMultiplier: ptr(p.Multiplier),
			DeliveryAttempts: ptr(p.Attempts), MaxDeliveryDelay: ptr(maxDelay.Milliseconds()), DeliveryJitter: ptr(p.Jitter),
		}
	case FourPhase:
		r := p.Resolved
		out.Policy = PolicyResponse{Kind: "fourPhase", Source: source, RetryPolicy: &r}
	}
	for _, s := range Schedule(p) {
		lo, hi := s.Step.Range()
		out.Attempts = append(out.Attempts, AttemptResponse{
			Attempt: s.Attempt, Phase: s.Step.Phase, Delay: s.Step.Draw(0.5).Milliseconds(),
			DelayMin: lo.Milliseconds(), DelayMax: hi.Milliseconds(), Jitter: s.Step.Jitter,
			SinceFirstAttempt: s.Since.Milliseconds(), SinceFirstAttemptMin: s.SinceMin.Milliseconds(),
			SinceFirstAttemptMax: s.SinceMax.Milliseconds(),
		})
	}
	return out
}

func ptr[T any](v T) *T { return &v }
