package delivery

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/roomhub/messaging-api/api"
	"github.com/roomhub/messaging-api/auth"
	"github.com/roomhub/messaging-api/broker"
	"github.com/roomhub/messaging-api/message"
	"github.com/roomhub/messaging-api/rooms"
	"github.com/roomhub/messaging-api/subscriptions"
)

// ErrDeadLetterNotFound is returned for a missing (or already replayed) dead letter.
var ErrDeadLetterNotFound = fmt.Errorf("dead letter %w", api.ErrNotFound)

// MaxReplay bounds one bulk replay.
const MaxReplay = 500

// Record is one send of a subscription, with what its attempt recorded: an
// item of the deliveries list.
type Record struct {
	message.Send
	ResponseBody  string
	NextAttemptAt time.Time
}

// Filter narrows a subscription's dead letters; its zero value takes all.
type Filter struct {
	Reason    string    // one of the Reason constants
	EventType string    // the event type's identifier
	Since     time.Time // dead-lettered at or after
	Until     time.Time // dead-lettered before
}

// Store stores dead letters and reads the delivery log.
type Store interface {
	// DeadLetters lists a subscription's dead letters that f takes, in id
	// order, after the id after.
	DeadLetters(ctx context.Context, subscriptionID uuid.UUID, f Filter, limit int, after uuid.UUID) ([]DeadLetter, error)
	DeadLetter(ctx context.Context, subscriptionID, id uuid.UUID) (DeadLetter, error)
	DeleteDeadLetter(ctx context.Context, subscriptionID, id uuid.UUID) error
	// Replay deletes the dead letters ids and stores events with their sends,
	// in one transaction; ErrDeadLetterNotFound if any is gone.
	Replay(ctx context.Context, ids []uuid.UUID, events []message.Event, sends []message.Send) error
	Deliveries(ctx context.Context, subscriptionID uuid.UUID, limit int, before uuid.UUID) ([]Record, error)
}

// Notifier wakes the outbox relay to send new pending copies (outbox.Relay is one).
type Notifier interface{ Notify() }

// Subscriptions finds a subscription with its room (subscriptions.Service is one).
type Subscriptions interface {
	Get(ctx context.Context, roomRef, id string) (rooms.Room, subscriptions.Subscription, error)
}

// Observer is told of replayed dead letters (metrics.Metrics is one).
type Observer interface {
	// Replayed counts n dead letters published again as new copies for a
	// subscription of type subscriptionType ("push", "pull").
	Replayed(subscriptionType string, n int)
}

type nopObserver struct{}

func (nopObserver) Replayed(string, int) {}

// Deps is what a Service works with.
type Deps struct {
	Store         Store
	Subscriptions Subscriptions
	Relay         Notifier
	// PushQueue is where replayed PUSH copies go.
	PushQueue broker.Destination
	Now       func() time.Time
	// Observer sees every replay; nil: nothing does.
	Observer Observer
}

// Service lists, replays and deletes dead letters, and lists deliveries.
type Service struct {
	store     Store
	subs      Subscriptions
	relay     Notifier
	pushQueue broker.Destination
	now       func() time.Time
	obs       Observer
}

// NewService wires the dead-letter and deliveries service.
func NewService(d Deps) *Service {
	s := &Service{store: d.Store, subs: d.Subscriptions, relay: d.Relay, pushQueue: d.PushQueue, now: d.Now, obs: d.Observer}
	if s.obs == nil {
		s.obs = nopObserver{}
	}
	return s
}

// Replay publishes dead letters again from attempt 1, as new events (same
// payload, correlation id and attributes; a fresh expiration).
func (s *Service) Replay(ctx context.Context, room rooms.Room, sub subscriptions.Subscription, dls []DeadLetter) ([]message.Event, error) {
	if sub.Status == subscriptions.StatusTerminated {
		return nil, subscriptions.ErrTerminated
	}
	if room.Status == rooms.StatusTerminated {
		return nil, rooms.ErrTerminated
	}
	now := s.now()
	requestID := uuid.Must(uuid.NewV7())
	dest := s.pushQueue
	if sub.Type == subscriptions.TypePull {
		dest = sub.Queue()
	}
	ids := make([]uuid.UUID, len(dls))
	events := make([]message.Event, len(dls))
	sends := make([]message.Send, len(dls))
	for i, dl := range dls {
		ev := dl.Event
		ev.ID, ev.RequestID, ev.PublishedAt, ev.Destinations = uuid.Must(uuid.NewV7()), requestID, now, 1
		ev.IdempotencyKey, ev.RequestHash = "", ""
		ev.ExpiresAt = time.Time{}
		if room.MessageExpiration > 0 {
			ev.ExpiresAt = now.Add(time.Duration(room.MessageExpiration) * time.Millisecond)
		}
		ids[i], events[i] = dl.ID, ev
		sends[i] = message.Send{
			ID: uuid.Must(uuid.NewV7()), EventID: ev.ID, RoomID: ev.RoomID, CorrelationID: ev.CorrelationID,
			SubscriptionID: sub.ID, SubscriptionType: string(sub.Type), Destination: dest.FQQN(),
			Attempt: 1, CreatedAt: now, Status: message.StatusPending,
		}
	}
	if err := s.store.Replay(ctx, ids, events, sends); err != nil {
		return nil, err
	}
	s.obs.Replayed(strings.ToLower(string(sub.Type)), len(sends))
	s.relay.Notify()
	return events, nil
}

// Routes registers the dead-letter and delivery endpoints of s under g (/v1).
func Routes(g *echo.Group, s *Service) {
	base := "/rooms/:roomId/subscriptions/:subscriptionId"
	one := auth.InSubscription(api.RoleManager, api.RoleSubscriber)
	auth.Handle(g, http.MethodGet, base+"/dead-letters", s.list, one)
	auth.Handle(g, http.MethodPost, base+"/dead-letters\\:replay", s.replayBulk, one)
	auth.Handle(g, http.MethodGet, base+"/dead-letters/:deadLetterId", s.get, one)
	// echo cannot end a segment with a literal after a parameter, so
	// "{id}:replay" arrives as the whole segment and replayOne cuts it.
	auth.Handle(g, http.MethodPost, base+"/dead-letters/:deadLetterId", s.replayOne, one)
	auth.Handle(g, http.MethodDelete, base+"/dead-letters/:deadLetterId", s.delete, one)
	auth.Handle(g, http.MethodGet, base+"/deliveries", s.deliveries, one)
}

// DeadLetterResponse is a dead letter as the API shows it.
type DeadLetterResponse struct {
	ID               string            `json:"id"`
	SubscriptionID   string            `json:"subscriptionId"`
	EventID          string            `json:"eventId"`
	CorrelationID    string            `json:"correlationId"`
	EventType        string            `json:"eventType"`
	EventTypeVersion int               `json:"eventTypeVersion"`
	Payload          json.RawMessage   `json:"payload"`
	Attributes       map[string]string `json:"attributes"`
	Attempts         int               `json:"attempts"`
	Reason           string            `json:"reason"`
	LastStatusCode   *int              `json:"lastStatusCode"`
	LastError        string            `json:"lastError"`
	PublishedAt      time.Time         `json:"publishedAt"`
	DeadLetteredAt   time.Time         `json:"deadLetteredAt"`
}

func toDeadLetterResponse(d DeadLetter) DeadLetterResponse {
	r := DeadLetterResponse{
		ID: d.ID.String(), SubscriptionID: d.SubscriptionID.String(), EventID: d.Event.ID.String(),
		CorrelationID: d.Event.CorrelationID, EventType: d.Event.EventType, EventTypeVersion: d.Event.Version,
		Payload: d.Event.Payload, Attributes: d.Event.Attributes, Attempts: d.Attempts, Reason: d.Reason,
		LastError: d.LastError, PublishedAt: d.Event.PublishedAt, DeadLetteredAt: d.CreatedAt,
	}
	if r.Attributes == nil {
		r.Attributes = map[string]string{}
	}
	if d.LastStatusCode != 0 {
		c := d.LastStatusCode
		r.LastStatusCode = &c
	}
	return r
}

func (s *Service) subscription(c echo.Context) (rooms.Room, subscriptions.Subscription, error) {
	return s.subs.Get(c.Request().Context(), c.Param("roomId"), c.Param("subscriptionId"))
}

// listRequest reads a list request of a subscription: the page (?limit=,
// ?cursor= as the last id seen) and the subscription.
func (s *Service) listRequest(c echo.Context) (subscriptions.Subscription, api.Page, uuid.UUID, error) {
	page, err := api.ParsePage(c, 50, 500)
	if err != nil {
		return subscriptions.Subscription{}, page, uuid.Nil, err
	}
	_, sub, err := s.subscription(c)
	if err != nil {
		return sub, page, uuid.Nil, err
	}
	last, err := page.AfterID()
	return sub, page, last, err
}

// maxEventTypeFilter bounds an eventType filter (identifiers are shorter).
const maxEventTypeFilter = 200

// checkFilter says what is wrong with f, naming each field by prefix+name.
func checkFilter(f Filter, prefix string, probs *api.Problems) {
	switch f.Reason {
	case "", ReasonExhausted, ReasonPermanent, ReasonExpired, ReasonBrokerRefused:
	default:
		probs.Add(prefix+"reason", fmt.Sprintf("must be one of %s, %s, %s, %s", ReasonExhausted, ReasonPermanent, ReasonExpired, ReasonBrokerRefused))
	}
	if len(f.EventType) > maxEventTypeFilter {
		probs.Add(prefix+"eventType", fmt.Sprintf("must be at most %d characters", maxEventTypeFilter))
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Since.Before(f.Until) {
		probs.Add(prefix+"until", "must be later than since")
	}
}

// filterQuery reads ?reason=, ?eventType=, ?since= and ?until= (RFC 3339).
func filterQuery(c echo.Context) (Filter, error) {
	f := Filter{Reason: c.QueryParam("reason"), EventType: c.QueryParam("eventType")}
	var probs api.Problems
	for name, at := range map[string]*time.Time{"since": &f.Since, "until": &f.Until} {
		if v := c.QueryParam(name); v != "" {
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				probs.Add(name, "must be a time in RFC 3339 form, such as 2026-01-02T15:04:05Z")
			}
			*at = t.UTC()
		}
	}
	checkFilter(f, "", &probs)
	return f, probs.Err()
}

func (s *Service) list(c echo.Context) error {
	sub, page, after, err := s.listRequest(c)
	if err != nil {
		return err
	}
	f, err := filterQuery(c)
	if err != nil {
		return err
	}
	dls, err := s.store.DeadLetters(c.Request().Context(), sub.ID, f, page.Limit, after)
	if err != nil {
		return err
	}
	out := api.List[DeadLetterResponse]{Items: make([]DeadLetterResponse, len(dls))}
	for i, d := range dls {
		out.Items[i] = toDeadLetterResponse(d)
	}
	if len(dls) == page.Limit {
		out.NextCursor = api.EncodeCursor(dls[len(dls)-1].ID.String())
	}
	return c.JSON(http.StatusOK, out)
}

func (s *Service) one(c echo.Context, rawID string) (rooms.Room, subscriptions.Subscription, DeadLetter, error) {
	room, sub, err := s.subscription(c)
	if err != nil {
		return room, sub, DeadLetter{}, err
	}
	id, err := uuid.Parse(rawID)
	if err != nil {
		return room, sub, DeadLetter{}, ErrDeadLetterNotFound
	}
	dl, err := s.store.DeadLetter(c.Request().Context(), sub.ID, id)
	return room, sub, dl, err
}

func (s *Service) get(c echo.Context) error {
	_, _, dl, err := s.one(c, c.Param("deadLetterId"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, toDeadLetterResponse(dl))
}

func (s *Service) delete(c echo.Context) error {
	_, sub, err := s.subscription(c)
	if err != nil {
		return err
	}
	id, err := uuid.Parse(c.Param("deadLetterId"))
	if err != nil {
		return ErrDeadLetterNotFound
	}
	if err := s.store.DeleteDeadLetter(c.Request().Context(), sub.ID, id); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

// ReplayedResponse names the new event a replayed dead letter became.
type ReplayedResponse struct {
	DeadLetterID  string `json:"deadLetterId"`
	EventID       string `json:"eventId"`
	CorrelationID string `json:"correlationId"`
}

// ReplayResponse is the answer to a replay, one entry per dead letter in order.
type ReplayResponse struct {
	Replayed []ReplayedResponse `json:"replayed"`
}

func replayed(dls []DeadLetter, evs []message.Event) ReplayResponse {
	out := ReplayResponse{Replayed: make([]ReplayedResponse, len(dls))}
	for i := range dls {
		out.Replayed[i] = ReplayedResponse{DeadLetterID: dls[i].ID.String(), EventID: evs[i].ID.String(), CorrelationID: evs[i].CorrelationID}
	}
	return out
}

func (s *Service) replayOne(c echo.Context) error {
	raw, ok := strings.CutSuffix(c.Param("deadLetterId"), ":replay")
	if !ok {
		return echo.ErrMethodNotAllowed
	}
	room, sub, dl, err := s.one(c, raw)
	if err != nil {
		return err
	}
	evs, err := s.Replay(c.Request().Context(), room, sub, []DeadLetter{dl})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusAccepted, replayed([]DeadLetter{dl}, evs))
}

type replayRequest struct {
	// IDs to replay; empty replays the oldest up to MaxReplay that the
	// filter takes.
	IDs       []string `json:"ids"`
	Reason    string   `json:"reason"`
	EventType string   `json:"eventType"`
	// Since and Until are RFC 3339 times, read here so that a bad one is a
	// problem naming it rather than a body that does not decode.
	Since string `json:"since"`
	Until string `json:"until"`
}

// filter is the request's filter; a time it cannot read is added to probs.
func (r replayRequest) filter(probs *api.Problems) Filter {
	f := Filter{Reason: r.Reason, EventType: r.EventType}
	for name, v := range map[string]struct {
		text string
		at   *time.Time
	}{"since": {r.Since, &f.Since}, "until": {r.Until, &f.Until}} {
		if v.text == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, v.text)
		if err != nil {
			probs.Add(name, "must be a time in RFC 3339 form, such as 2026-01-02T15:04:05Z")
		}
		*v.at = t.UTC()
	}
	return f
}

func (s *Service) replayBulk(c echo.Context) error {
	var req replayRequest
	if err := api.DecodeOptional(c, &req); err != nil {
		return err
	}
	if len(req.IDs) > MaxReplay {
		return api.Invalid("ids", fmt.Sprintf("must list at most %d ids", MaxReplay))
	}
	var fprobs api.Problems
	f := req.filter(&fprobs)
	checkFilter(f, "", &fprobs)
	if len(req.IDs) > 0 && f != (Filter{}) {
		fprobs.Add("ids", "names dead letters: it cannot go with reason, eventType, since or until, which select them")
	}
	if err := fprobs.Err(); err != nil {
		return err
	}
	room, sub, err := s.subscription(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	var dls []DeadLetter
	if len(req.IDs) == 0 {
		if dls, err = s.store.DeadLetters(ctx, sub.ID, f, MaxReplay, uuid.Nil); err != nil {
			return err
		}
	}
	var probs api.Problems
	seen := map[uuid.UUID]bool{}
	for i, raw := range req.IDs {
		id, err := uuid.Parse(raw)
		if err != nil {
			probs.Add(fmt.Sprintf("ids[%d]", i), "is not a dead letter id")
			continue
		}
		if seen[id] {
			probs.Add(fmt.Sprintf("ids[%d]", i), "is listed twice")
			continue
		}
		seen[id] = true
		dl, err := s.store.DeadLetter(ctx, sub.ID, id)
		if err != nil {
			if api.IsNotFound(err) {
				probs.Add(fmt.Sprintf("ids[%d]", i), "no such dead letter of this subscription")
				continue
			}
			return err
		}
		dls = append(dls, dl)
	}
	if err := probs.Err(); err != nil {
		return err
	}
	if len(dls) == 0 {
		return c.JSON(http.StatusAccepted, ReplayResponse{Replayed: []ReplayedResponse{}})
	}
	evs, err := s.Replay(ctx, room, sub, dls)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusAccepted, replayed(dls, evs))
}

// DeliveryResponse is one row of a subscription's delivery log.
type DeliveryResponse struct {
	ID             string     `json:"id"`
	EventID        string     `json:"eventId"`
	CorrelationID  string     `json:"correlationId"`
	Attempt        int        `json:"attempt"`
	ScheduledDelay int64      `json:"scheduledDelay"`
	CreatedAt      time.Time  `json:"createdAt"`
	SentAt         *time.Time `json:"sentAt"`
	Status         string     `json:"status"`
	StatusCode     *int       `json:"statusCode"`
	Latency        *int64     `json:"latency"`
	Error          string     `json:"error"`
	ResponseBody   string     `json:"responseBody"`
	// RequestStartedAt is when the push request began (completedAt less the
	// latency): after sentAt by the scheduled delay, before completedAt.
	RequestStartedAt *time.Time `json:"requestStartedAt"`
	CompletedAt      *time.Time `json:"completedAt"`
	NextAttemptAt    *time.Time `json:"nextAttemptAt"`
}

func optTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func (s *Service) deliveries(c echo.Context) error {
	sub, page, before, err := s.listRequest(c)
	if err != nil {
		return err
	}
	ds, err := s.store.Deliveries(c.Request().Context(), sub.ID, page.Limit, before)
	if err != nil {
		return err
	}
	out := api.List[DeliveryResponse]{Items: make([]DeliveryResponse, len(ds))}
	for i, d := range ds {
		r := DeliveryResponse{
			ID: d.ID.String(), EventID: d.EventID.String(), CorrelationID: d.CorrelationID, Attempt: d.Attempt,
			ScheduledDelay: d.ScheduledDelay.Milliseconds(), CreatedAt: d.CreatedAt, SentAt: optTime(d.SentAt),
			Status: string(d.Status), Error: d.Error, ResponseBody: d.ResponseBody,
			CompletedAt: optTime(d.CompletedAt), NextAttemptAt: optTime(d.NextAttemptAt),
			RequestStartedAt: message.RequestStartedAt(d.CompletedAt, d.Latency, d.StatusCode),
		}
		if d.StatusCode != 0 {
			c := d.StatusCode
			r.StatusCode = &c
		}
		if d.Latency > 0 || d.StatusCode != 0 {
			ms := d.Latency.Milliseconds()
			r.Latency = &ms
		}
		out.Items[i] = r
	}
	if len(ds) == page.Limit {
		out.NextCursor = api.EncodeCursor(ds[len(ds)-1].ID.String())
	}
	return c.JSON(http.StatusOK, out)
}
