package subscriptions

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/roomhub/messaging-api/api"
	"github.com/roomhub/messaging-api/rooms"
)

// Limits on a subscription request: each listed event type and version is
// looked up and stored as a row.
const (
	maxFilters        = 100  // event types in eventTypes
	maxFilterVersions = 100  // versions of one event type
	maxVersions       = 1000 // versions over all the event types
	maxPushURLSize    = 2048
	// MaxRejectionReason bounds the reason of a rejection, in bytes.
	MaxRejectionReason = 1000
)

// Bounds of a PUSH subscription's maxDeliveryRate (requests per second).
const (
	MinDeliveryRate = 0.01
	MaxDeliveryRate = 100_000
)

// Ack deadline bounds of PULL subscriptions.
const (
	DefaultAckDeadline = 30 * time.Second
	MinAckDeadline     = time.Second
	MaxAckDeadline     = 10 * time.Minute
)

// Service manages subscriptions.
type Service struct {
	store       Store
	catalog     Catalog
	queues      Queues
	checkTarget TargetCheck
	now         func() time.Time
	logger      *slog.Logger
	maxPerRoom  int
	// onChange hears of every committed change to a room's subscriptions.
	onChange func(roomID uuid.UUID)
	tester   TestSender
	tests    *testLimits
}

func (svc *Service) changed(roomID uuid.UUID) {
	if svc.onChange != nil {
		svc.onChange(roomID)
	}
}

// TargetCheck returns an error saying why a push URL must not be used, or
// nil; it must not resolve names (netguard.Guard.CheckURL is one). The
// dispatcher enforces the same rules on every delivery; this check only
// refuses what is refused for sure, early, with a 422.
type TargetCheck func(*url.URL) error

// Deps is what a Service needs.
type Deps struct {
	Store   Store
	Catalog Catalog
	Queues  Queues
	// CheckTarget refuses push URLs early; nil: no check.
	CheckTarget TargetCheck
	Now         func() time.Time
	Logger      *slog.Logger
	// MaxPerRoom caps the subscriptions of one room (0: no cap). Under
	// concurrent creation the cap may be passed by the number of racing
	// requests.
	MaxPerRoom int
	// OnChange, when not nil, is called with the room's id after every
	// committed creation, update or deletion of one of its subscriptions (a
	// cache of them empties itself there), before the answer leaves. A
	// secret rotation changes no routing and is not reported.
	OnChange func(roomID uuid.UUID)
	// Tester sends the test events of POST …:test; nil: the route answers
	// 503.
	Tester TestSender
	// TestInterval is how often one subscription may be sent a test event
	// by this process (0: DefaultTestInterval).
	TestInterval time.Duration
}

// NewService returns a Service over d.Store.
func NewService(d Deps) *Service {
	return &Service{store: d.Store, catalog: d.Catalog, queues: d.Queues, checkTarget: d.CheckTarget, now: d.Now,
		logger: d.Logger, maxPerRoom: d.MaxPerRoom, onChange: d.OnChange, tester: d.Tester, tests: newTestLimits(d.TestInterval)}
}

// FilterInput is one entry of a request's eventTypes.
type FilterInput struct {
	EventType string `json:"eventType"`
	Versions  []int  `json:"versions,omitempty"`
}

// Patch is a create or update request; absent fields keep their value.
type Patch struct {
	Type                    api.Nullable[Type]
	PushURL                 api.Nullable[string]
	PushAuth                api.Nullable[PushAuthInput]
	EventTypes              api.Nullable[[]FilterInput]
	AttributeFilter         api.Nullable[json.RawMessage]
	DeliveryDelay           api.Nullable[int64]
	DeliveryDelayMultiplier api.Nullable[float64]
	DeliveryAttempts        api.Nullable[int]
	MaxDeliveryDelay        api.Nullable[int64]
	DeliveryJitter          api.Nullable[float64]
	RetryPolicy             api.Nullable[rooms.RetryPolicy]
	CircuitBreaker          api.Nullable[rooms.CircuitBreaker]
	MaxDeliveryRate         api.Nullable[float64]
	AckDeadline             api.Nullable[int64]
	Status                  api.Nullable[Status]
	Owner                   api.Nullable[string]
}

// delivery is the part of p that overrides the room's delivery settings.
func (p Patch) delivery() rooms.DeliveryPatch {
	return rooms.DeliveryPatch{
		DeliveryDelay: p.DeliveryDelay, DeliveryDelayMultiplier: p.DeliveryDelayMultiplier,
		DeliveryAttempts: p.DeliveryAttempts, MaxDeliveryDelay: p.MaxDeliveryDelay,
		DeliveryJitter: p.DeliveryJitter, RetryPolicy: p.RetryPolicy, CircuitBreaker: p.CircuitBreaker,
	}
}

// apply validates p against room and writes it onto s.
func (svc *Service) apply(ctx context.Context, room rooms.Room, s *Subscription, p Patch, creating bool) error {
	var probs api.Problems
	switch {
	case creating && (!p.Type.Set || p.Type.Null):
		probs.Add("type", "is required: PUSH or PULL")
	case creating:
		if !p.Type.Value.valid() {
			probs.Add("type", "must be PUSH or PULL")
		}
		s.Type = p.Type.Value
	case p.Type.Set && p.Type.Value != s.Type:
		probs.Add("type", "cannot be changed; create another subscription")
	}

	if p.PushURL.Set {
		s.PushURL = ""
		if !p.PushURL.Null {
			s.PushURL = p.PushURL.Value
		}
	}
	switch {
	case s.Type == TypePush && s.PushURL == "":
		probs.Add("pushUrl", "is required for a PUSH subscription")
	case s.Type == TypePush:
		if msg := checkPushURL(s.PushURL); msg != "" {
			probs.Add("pushUrl", msg)
		} else if p.PushURL.Set && svc.checkTarget != nil {
			// Only a new URL: a PATCH of other fields must not fail on a
			// URL that was accepted before the rules changed (deliveries
			// to it are refused and dead-lettered with the reason).
			u, _ := url.Parse(s.PushURL)
			if err := svc.checkTarget(u); err != nil {
				probs.Add("pushUrl", err.Error())
			}
		}
	case s.Type == TypePull && s.PushURL != "":
		probs.Add("pushUrl", "is only for PUSH subscriptions")
	}

	// pushAuth is written whole (its secrets cannot be read back to merge
	// with); null removes it.
	if p.PushAuth.Set {
		s.PushAuth = nil
		switch {
		case p.PushAuth.Null:
		case s.Type == TypePull:
			probs.AddPointer("pushAuth", "/pushAuth", "is only for PUSH subscriptions")
		default:
			s.PushAuth = p.PushAuth.Value.validate(&probs)
		}
	}

	if creating && (!p.EventTypes.Set || p.EventTypes.Null) {
		probs.Add("eventTypes", "is required: at least one event type")
	} else if p.EventTypes.Set {
		if p.EventTypes.Null {
			probs.Add("eventTypes", "must not be null")
		} else {
			filters, err := svc.resolveFilters(ctx, room, p.EventTypes.Value, &probs)
			if err != nil {
				return err
			}
			s.EventTypes = filters
		}
	}

	if p.AttributeFilter.Set {
		s.AttributeFilter = nil
		if !p.AttributeFilter.Null {
			s.AttributeFilter = ParseAttributeFilter(p.AttributeFilter.Value, &probs)
		}
	}

	p.delivery().Validate(rooms.OnSubscription, &probs)
	if p.DeliveryDelay.Set {
		s.DeliveryDelay = p.DeliveryDelay.Ptr()
	}
	if p.DeliveryDelayMultiplier.Set {
		s.DeliveryDelayMultiplier = p.DeliveryDelayMultiplier.Ptr()
	}
	if p.DeliveryAttempts.Set {
		s.DeliveryAttempts = p.DeliveryAttempts.Ptr()
	}
	if p.MaxDeliveryDelay.Set {
		s.MaxDeliveryDelay = p.MaxDeliveryDelay.Ptr()
	}
	if p.DeliveryJitter.Set {
		s.DeliveryJitter = p.DeliveryJitter.Ptr()
	}
	if p.RetryPolicy.Set {
		s.RetryPolicy = p.RetryPolicy.Ptr()
	}
	if p.CircuitBreaker.Set {
		s.CircuitBreaker = p.CircuitBreaker.Ptr()
	}
	if s.CircuitBreaker != nil && s.Type == TypePull {
		probs.Add("circuitBreaker", "is only for PUSH subscriptions")
	}
	if p.MaxDeliveryRate.Set {
		s.MaxDeliveryRate = p.MaxDeliveryRate.Ptr()
	}
	switch v := s.MaxDeliveryRate; {
	case v == nil:
	case s.Type == TypePull:
		probs.Add("maxDeliveryRate", "is only for PUSH subscriptions")
	case !(*v >= MinDeliveryRate && *v <= MaxDeliveryRate):
		probs.Add("maxDeliveryRate", fmt.Sprintf("must be null (no limit) or from %g to %d requests per second", MinDeliveryRate, MaxDeliveryRate))
	}
	if p.AckDeadline.Set {
		switch v := p.AckDeadline.Ptr(); {
		case v == nil:
			s.AckDeadline = DefaultAckDeadline
		case *v < MinAckDeadline.Milliseconds() || *v > MaxAckDeadline.Milliseconds():
			probs.Add("ackDeadline", fmt.Sprintf("must be from %d to %d ms", MinAckDeadline.Milliseconds(), MaxAckDeadline.Milliseconds()))
		default:
			s.AckDeadline = time.Duration(*v) * time.Millisecond
		}
	}
	if p.Status.Set {
		switch {
		case p.Status.Null:
			probs.Add("status", "must not be null")
		case !p.Status.Value.settable():
			probs.Add("status", "must be ACTIVE, PAUSED or TERMINATED (PENDING and REJECTED come from the room manager's decision)")
		case creating && p.Status.Value == StatusTerminated:
			probs.Add("status", "must be ACTIVE or PAUSED at creation")
		default:
			s.Status = p.Status.Value
		}
	}
	return probs.Err()
}

// storeError names pushAuth when the store cannot keep it.
func storeError(err error) error {
	if errors.Is(err, ErrNoPushAuthKey) {
		var probs api.Problems
		probs.AddPointer("pushAuth", "/pushAuth", ErrNoPushAuthKey.Error())
		return probs.Err()
	}
	return err
}

// checkPushURL returns what is wrong with a push URL, or "".
func checkPushURL(raw string) string {
	if len(raw) > maxPushURLSize {
		return fmt.Sprintf("must be at most %d characters", maxPushURLSize)
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return "is not a URL"
	case u.Scheme != "http" && u.Scheme != "https":
		return "must be an absolute http or https URL"
	case u.Host == "" || u.Hostname() == "":
		return "must name a host"
	case u.Fragment != "":
		return "must not have a #fragment"
	}
	return ""
}

// resolveFilters checks each filter's event type and versions exist in room.
// Problems go to probs; only unexpected errors are returned.
func (svc *Service) resolveFilters(ctx context.Context, room rooms.Room, in []FilterInput, probs *api.Problems) ([]Filter, error) {
	if len(in) == 0 {
		probs.Add("eventTypes", "must name at least one event type")
		return nil, nil
	}
	if len(in) > maxFilters {
		probs.Add("eventTypes", fmt.Sprintf("must name at most %d event types", maxFilters))
		return nil, nil
	}
	total := 0
	for i, f := range in {
		total += len(f.Versions)
		if len(f.Versions) > maxFilterVersions {
			probs.Add(fmt.Sprintf("eventTypes[%d].versions", i), fmt.Sprintf("must list at most %d versions (none: every version)", maxFilterVersions))
		}
	}
	if total > maxVersions {
		probs.Add("eventTypes", fmt.Sprintf("must list at most %d versions in all", maxVersions))
	}
	if probs.Len() > 0 {
		return nil, nil // before any lookup
	}
	seen := map[string]bool{}
	out := make([]Filter, 0, len(in))
	for i, f := range in {
		field := fmt.Sprintf("eventTypes[%d]", i)
		if f.EventType == "" {
			probs.Add(field+".eventType", "is required")
			continue
		}
		if seen[f.EventType] {
			probs.Add(field+".eventType", fmt.Sprintf("event type %q is listed twice", f.EventType))
			continue
		}
		seen[f.EventType] = true
		et, err := svc.catalog.EventTypeOf(ctx, room.ID, f.EventType)
		if errors.Is(err, rooms.ErrEventTypeNotFound) {
			probs.Add(field+".eventType", fmt.Sprintf("event type %q does not exist in room %q", f.EventType, room.Identifier))
			continue
		}
		if err != nil {
			return nil, err
		}
		versions, err := svc.checkVersions(ctx, et, f.Versions, field, probs)
		if err != nil {
			return nil, err
		}
		out = append(out, Filter{EventTypeID: et.ID, EventType: et.Identifier, Versions: versions})
	}
	// The order the store reads them back in, so create and get answer alike.
	slices.SortFunc(out, func(a, b Filter) int { return strings.Compare(a.EventType, b.EventType) })
	return out, nil
}

// checkVersions returns listed, sorted, once each problem with a version is
// in probs: listed twice, or not a version of et. The versions are looked up
// in one query.
func (svc *Service) checkVersions(ctx context.Context, et rooms.EventType, listed []int, field string, probs *api.Problems) ([]int, error) {
	if len(listed) == 0 {
		return []int{}, nil
	}
	exist, err := svc.catalog.ExistingVersions(ctx, et.ID, listed)
	if err != nil {
		return nil, err
	}
	versions := make([]int, 0, len(listed))
	seen := map[int]bool{}
	for j, v := range listed {
		vfield := fmt.Sprintf("%s.versions[%d]", field, j)
		switch {
		case seen[v]:
			probs.Add(vfield, fmt.Sprintf("version %d is listed twice", v))
		case !sortedContains(exist, v):
			probs.Add(vfield, fmt.Sprintf("version %d of event type %q does not exist", v, et.Identifier))
		default:
			versions = append(versions, v)
		}
		seen[v] = true
	}
	slices.Sort(versions)
	return versions, nil
}

func sortedContains(s []int, v int) bool {
	_, found := slices.BinarySearch(s, v)
	return found
}

// Create validates p and creates the subscription; a PULL subscription's
// queue is created on the broker first, so nothing is stored without it.
func (svc *Service) Create(ctx context.Context, roomRef string, p Patch) (Subscription, error) {
	room, err := svc.catalog.Room(ctx, roomRef)
	if err != nil {
		return Subscription{}, err
	}
	now := svc.now().UTC()
	s := Subscription{
		ID:          uuid.Must(uuid.NewV7()),
		RoomID:      room.ID,
		Status:      StatusActive,
		AckDeadline: DefaultAckDeadline,
		CreatedAt:   now,
		UpdatedAt:   now,
	}
	if c := api.CallerFrom(ctx); c != nil && c.Role == api.RoleSubscriber && !p.Owner.Set {
		// A subscriber's subscriptions are its own.
		p.Owner = api.Nullable[string]{Set: true, Value: c.Subject}
	}
	if err := applyOwner(ctx, &s, p.Owner); err != nil {
		return Subscription{}, err
	}
	if err := svc.apply(ctx, room, &s, p, true); err != nil {
		return Subscription{}, err
	}
	if needsApproval(ctx, room) {
		if s.Status != StatusActive {
			return Subscription{}, api.Invalid("status", fmt.Sprintf("must be ACTIVE or absent: room %q approves its subscriptions (subscriptionApproval MANUAL), so this one starts PENDING and becomes ACTIVE once approved", room.Identifier))
		}
		s.Status = StatusPending
	}
	if svc.maxPerRoom > 0 {
		n, err := svc.store.CountSubscriptions(ctx, room.ID)
		if err != nil {
			return Subscription{}, err
		}
		if n >= svc.maxPerRoom {
			return Subscription{}, fmt.Errorf("%w: room %s has %d subscriptions, the most a room may have (ROOM_MAX_SUBSCRIPTIONS); delete one first",
				api.ErrLimitReached, room.ID, n)
		}
	}
	if s.Type == TypePush {
		s.SigningSecret = NewSecret()
	}
	if s.Type == TypePull && s.Status != StatusPending {
		// A PENDING subscription gets its queue on approval: one that is
		// rejected never had one, and nothing is routed to it before.
		if err := svc.ensureQueue(ctx, s); err != nil {
			return Subscription{}, err
		}
	}
	if err := svc.store.CreateSubscription(ctx, s); err != nil {
		return Subscription{}, storeError(err)
	}
	svc.changed(s.RoomID)
	return s, nil
}

// ensureQueue creates the broker queue of PULL subscription s.
func (svc *Service) ensureQueue(ctx context.Context, s Subscription) error {
	if err := svc.queues.EnsureQueue(ctx, s.Queue()); err != nil {
		return fmt.Errorf("create queue %s: %w: %w", s.Queue(), err, api.ErrUnavailable)
	}
	return nil
}

// needsApproval reports whether a subscription the caller creates in room
// starts PENDING: the room approves its subscriptions and the caller does
// not manage it (nor is an admin, nor is authentication off).
func needsApproval(ctx context.Context, room rooms.Room) bool {
	return room.SubscriptionApproval == rooms.ApprovalManual && !api.CallerFrom(ctx).Manages(room.ManagerIdentifier)
}

// Get finds a subscription of the room roomRef names.
func (svc *Service) Get(ctx context.Context, roomRef, id string) (rooms.Room, Subscription, error) {
	room, err := svc.catalog.Room(ctx, roomRef)
	if err != nil {
		return rooms.Room{}, Subscription{}, err
	}
	sid, err := uuid.Parse(id)
	if err != nil {
		return rooms.Room{}, Subscription{}, ErrNotFound
	}
	s, err := svc.store.Subscription(ctx, room.ID, sid)
	if err != nil {
		return rooms.Room{}, Subscription{}, err
	}
	return room, s, nil
}

// List lists the room's subscriptions in creation order.
func (svc *Service) List(ctx context.Context, roomRef string, q Query, page api.Page) ([]Subscription, error) {
	room, err := svc.catalog.Room(ctx, roomRef)
	if err != nil {
		return nil, err
	}
	q.RoomID = room.ID
	q.Limit = page.Limit
	if c := api.CallerFrom(ctx); c != nil && c.Role == api.RoleSubscriber {
		q.Owner, q.OwnerSet = c.Subject, true
	}
	if q.After, err = page.AfterID(); err != nil {
		return nil, err
	}
	return svc.store.Subscriptions(ctx, q)
}

// Update applies p to a subscription. A TERMINATED subscription cannot change.
func (svc *Service) Update(ctx context.Context, roomRef, id string, p Patch) (Subscription, error) {
	room, s, err := svc.Get(ctx, roomRef, id)
	if err != nil {
		return Subscription{}, err
	}
	if err := changeable(s); err != nil {
		return Subscription{}, err
	}
	if s.Status == StatusPending && p.Status.Set && (p.Status.Value == StatusActive || p.Status.Value == StatusPaused) {
		return Subscription{}, ErrPending
	}
	if err := applyOwner(ctx, &s, p.Owner); err != nil {
		return Subscription{}, err
	}
	was := s
	if err := svc.apply(ctx, room, &s, p, false); err != nil {
		return Subscription{}, err
	}
	s.UpdatedAt = svc.now().UTC()
	if err := svc.store.UpdateSubscription(ctx, s); err != nil {
		return Subscription{}, storeError(err)
	}
	svc.changed(s.RoomID)
	// A new endpoint, or a subscription resumed (its operator says the
	// endpoint is fixed), starts with a closed circuit.
	if s.Type == TypePush && (s.PushURL != was.PushURL || (was.Status == StatusPaused && s.Status == StatusActive)) {
		if err := svc.store.ResetCircuit(ctx, s.RoomID, s.ID); err != nil {
			return Subscription{}, err
		}
		s.Circuit = Circuit{State: CircuitClosed}
	}
	return s, nil
}

// changeable refuses a change to a subscription in a final status.
func changeable(s Subscription) error {
	switch s.Status {
	case StatusTerminated:
		return ErrTerminated
	case StatusRejected:
		return ErrRejected
	}
	return nil
}

// Approve makes a PENDING subscription ACTIVE, creating a PULL
// subscription's queue first (503 and still PENDING if the broker cannot
// be reached).
func (svc *Service) Approve(ctx context.Context, roomRef, id string) (Subscription, error) {
	_, s, err := svc.Get(ctx, roomRef, id)
	if err != nil {
		return Subscription{}, err
	}
	if err := decidable(s); err != nil {
		return Subscription{}, err
	}
	if s.Type == TypePull {
		if err := svc.ensureQueue(ctx, s); err != nil {
			return Subscription{}, err
		}
	}
	return svc.decide(ctx, s, StatusActive, "")
}

// Reject makes a PENDING subscription REJECTED, which is final, for reason.
func (svc *Service) Reject(ctx context.Context, roomRef, id, reason string) (Subscription, error) {
	reason = strings.TrimSpace(reason)
	if reason == "" || len(reason) > MaxRejectionReason {
		return Subscription{}, api.Invalid("reason", fmt.Sprintf("is required: 1 to %d bytes saying why, which the subscriber reads", MaxRejectionReason))
	}
	_, s, err := svc.Get(ctx, roomRef, id)
	if err != nil {
		return Subscription{}, err
	}
	if err := decidable(s); err != nil {
		return Subscription{}, err
	}
	return svc.decide(ctx, s, StatusRejected, reason)
}

// decide stores the decision on s, who made it and when.
func (svc *Service) decide(ctx context.Context, s Subscription, status Status, reason string) (Subscription, error) {
	now := svc.now().UTC()
	s.Status, s.RejectionReason, s.DecidedAt, s.UpdatedAt = status, reason, now, now
	s.DecidedBy = ""
	if c := api.CallerFrom(ctx); c != nil {
		// A manager always has a subject; an admin key may not.
		s.DecidedBy = c.Subject
		if s.DecidedBy == "" {
			s.DecidedBy = c.KeyID.String()
		}
	}
	if err := svc.store.Decide(ctx, s); err != nil {
		return Subscription{}, err
	}
	svc.changed(s.RoomID)
	return s, nil
}

// ResetCircuit closes a PUSH subscription's circuit at once: its held
// messages are delivered again as they come back (within a few seconds for
// those parked in the outbox, within the wait they were held for, at most 5
// minutes, for the others).
func (svc *Service) ResetCircuit(ctx context.Context, roomRef, id string) (Subscription, error) {
	_, s, err := svc.Get(ctx, roomRef, id)
	if err != nil {
		return Subscription{}, err
	}
	if s.Type != TypePush {
		return Subscription{}, ErrNoCircuit
	}
	if s.Status == StatusTerminated {
		return Subscription{}, ErrTerminated
	}
	if err := svc.store.ResetCircuit(ctx, s.RoomID, s.ID); err != nil {
		return Subscription{}, err
	}
	if !s.Circuit.Closed() {
		svc.logger.InfoContext(ctx, "push: circuit reset by request; deliveries resume", slog.String("subscription_id", s.ID.String()),
			slog.String("was", string(s.Circuit.State)))
	}
	s.Circuit = Circuit{State: CircuitClosed}
	return s, nil
}

// decidable refuses to decide on a subscription that is not PENDING, saying
// what it is.
func decidable(s Subscription) error {
	if s.Status == StatusPending {
		return nil
	}
	was := ""
	switch {
	case s.Status == StatusRejected:
		was = fmt.Sprintf(" (rejected by %q at %s)", s.DecidedBy, s.DecidedAt.Format(time.RFC3339))
	case !s.DecidedAt.IsZero():
		was = fmt.Sprintf(" (approved by %q at %s)", s.DecidedBy, s.DecidedAt.Format(time.RFC3339))
	}
	return fmt.Errorf("the subscription is %s%s, not PENDING: only a PENDING subscription is approved or rejected: %w", s.Status, was, api.ErrInvalidState)
}

// Delete deletes a subscription and, for PULL, its queue and the messages in it.
func (svc *Service) Delete(ctx context.Context, roomRef, id string) error {
	_, s, err := svc.Get(ctx, roomRef, id)
	if err != nil {
		return err
	}
	if err := svc.store.DeleteSubscription(ctx, s.RoomID, s.ID); err != nil {
		return err
	}
	svc.changed(s.RoomID)
	if s.Type == TypePull {
		// The subscription is gone either way; a queue left behind only holds
		// messages nobody can pull, so this is worth a warning, not a failure.
		if err := svc.queues.DeleteQueue(ctx, s.Queue()); err != nil {
			svc.logger.WarnContext(ctx, "pull queue not deleted", slog.String("queue", s.Queue().FQQN()), slog.Any("error", err))
		}
	}
	return nil
}

// QueueCleanup deletes the queues of PULL subscriptions removed with their
// room (it is the rooms.Cleanup of the service).
type QueueCleanup struct {
	Queues Queues
	Logger *slog.Logger
}

// RoomDeleted implements rooms.Cleanup. The rows are gone already; a queue
// left behind only holds messages nobody can pull, so failures are logged.
func (c QueueCleanup) RoomDeleted(ctx context.Context, roomID uuid.UUID, pulls []uuid.UUID) {
	for _, id := range pulls {
		q := QueueOf(roomID, id)
		if err := c.Queues.DeleteQueue(ctx, q); err != nil {
			c.Logger.WarnContext(ctx, "pull queue not deleted", slog.String("queue", q.FQQN()), slog.Any("error", err))
		}
	}
}

// Grace periods of a secret rotation.
const (
	DefaultRotationGrace = 24 * time.Hour
	MaxRotationGrace     = 7 * 24 * time.Hour
)

// NewSecret makes a Standard Webhooks signing secret: "whsec_" and the
// base64 of 32 random bytes.
func NewSecret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on Linux
	return "whsec_" + base64.StdEncoding.EncodeToString(b)
}

// RotateSecret gives a PUSH subscription a new signing secret; the old one
// keeps signing too for grace, so receivers can switch without a gap.
func (svc *Service) RotateSecret(ctx context.Context, roomRef, id string, grace time.Duration) (Subscription, error) {
	_, s, err := svc.Get(ctx, roomRef, id)
	if err != nil {
		return Subscription{}, err
	}
	if s.Type != TypePush {
		return Subscription{}, ErrNotPush
	}
	if err := changeable(s); err != nil {
		return Subscription{}, err
	}
	now := svc.now().UTC()
	s.PreviousSecret, s.PreviousSecretExpiresAt = s.SigningSecret, now.Add(grace)
	s.SigningSecret = NewSecret()
	s.UpdatedAt = now
	if err := svc.store.UpdateSecrets(ctx, s); err != nil {
		return Subscription{}, err
	}
	return s, nil
}

// applyOwner sets the owner from a request: anyone but a subscriber key may
// name any owner; a subscriber only itself.
func applyOwner(ctx context.Context, s *Subscription, owner api.Nullable[string]) error {
	if !owner.Set {
		return nil
	}
	v := ""
	if !owner.Null {
		v = strings.TrimSpace(owner.Value)
		if v == "" || len(v) > api.MaxSubjectLength {
			return api.Invalid("owner", fmt.Sprintf("must be 1 to %d characters, or null for no owner", api.MaxSubjectLength))
		}
	}
	if c := api.CallerFrom(ctx); c != nil && c.Role == api.RoleSubscriber && v != c.Subject {
		return api.Forbidden("owner: a subscriber key owns its subscriptions itself (%q)", c.Subject)
	}
	s.Owner = v
	return nil
}
