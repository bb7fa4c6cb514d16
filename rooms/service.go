package rooms

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/roomhub/messaging-api/api"
)

// Defaults for fields a room is created without.
const (
	DefaultDeliveryDelay           = 1000
	DefaultDeliveryDelayMultiplier = 2.0
	DefaultDeliveryAttempts        = 3
)

// Limits on room fields; they keep the backoff computation finite.
const (
	MaxMessageExpiration       = 10 * 365 * 24 * 3600 * 1000 // ten years
	MaxDeliveryDelay           = 7 * 24 * 3600 * 1000        // a week
	MaxDeliveryDelayMultiplier = 1000.0
	MaxDeliveryAttempts        = 1000
	maxIdentifierLength        = 200
	maxDescriptionLength       = 1000
	MaxVersion                 = 1_000_000
)

var identifierPattern = regexp.MustCompile(`^[a-zA-Z0-9_.-]+$`)

// ValidIdentifier checks a room or event type identifier; field names it in the error.
func ValidIdentifier(field, s string, p *api.Problems) {
	switch {
	case s == "":
		p.Add(field, "is required")
	case len(s) > maxIdentifierLength:
		p.Add(field, fmt.Sprintf("must be at most %d characters", maxIdentifierLength))
	case !identifierPattern.MatchString(s):
		p.Add(field, "must match ^[a-zA-Z0-9_.-]+$")
	}
}

// Service manages rooms, event types and versions.
type Service struct {
	store   Store
	cleanup Cleanup
	now     func() time.Time
	// onChange hears of every committed change to a room, its event types
	// or versions.
	onChange func(roomID uuid.UUID)
}

// Deps is what a Service needs.
type Deps struct {
	Store Store
	// Cleanup hears of the PULL subscriptions a forced room deletion removed.
	Cleanup Cleanup
	Now     func() time.Time
	// OnChange, when not nil, is called with the room's id after every
	// committed change to a room, its event types or versions (a cache of
	// them empties itself there), before the answer leaves.
	OnChange func(roomID uuid.UUID)
}

// NewService returns a Service over d.Store.
func NewService(d Deps) *Service {
	return &Service{store: d.Store, cleanup: d.Cleanup, now: d.Now, onChange: d.OnChange}
}

func (s *Service) changed(roomID uuid.UUID) {
	if s.onChange != nil {
		s.onChange(roomID)
	}
}

// RoomPatch is a create or update request; absent fields keep their value (or
// get the default on create).
type RoomPatch struct {
	Identifier              api.Nullable[string]
	ManagerIdentifier       api.Nullable[string]
	MessageExpiration       api.Nullable[int64]
	DeliveryDelay           api.Nullable[int64]
	DeliveryDelayMultiplier api.Nullable[float64]
	DeliveryAttempts        api.Nullable[int]
	MaxDeliveryDelay        api.Nullable[int64]
	DeliveryJitter          api.Nullable[float64]
	RetryPolicy             api.Nullable[RetryPolicy]
	CircuitBreaker          api.Nullable[CircuitBreaker]
	SubscriptionApproval    api.Nullable[Approval]
	Status                  api.Nullable[Status]
}

// apply validates p and writes it onto r.
func (p RoomPatch) apply(r *Room, creating bool) error {
	var probs api.Problems
	notNull := func(field string, null bool) bool {
		if null {
			probs.Add(field, "must not be null")
		}
		return !null
	}
	if creating && !p.Identifier.Set {
		probs.Add("identifier", "is required")
	} else if p.Identifier.Set && notNull("identifier", p.Identifier.Null) {
		ValidIdentifier("identifier", p.Identifier.Value, &probs)
		if _, err := uuid.Parse(p.Identifier.Value); err == nil {
			probs.Add("identifier", "must not be a UUID: paths accept a room's id or its identifier")
		}
		r.Identifier = p.Identifier.Value
	}
	if creating && !p.ManagerIdentifier.Set {
		probs.Add("managerIdentifier", "is required")
	} else if p.ManagerIdentifier.Set && notNull("managerIdentifier", p.ManagerIdentifier.Null) {
		v := p.ManagerIdentifier.Value
		switch {
		case strings.TrimSpace(v) == "":
			probs.Add("managerIdentifier", "must not be blank")
		case len(v) > api.MaxSubjectLength:
			probs.Add("managerIdentifier", fmt.Sprintf("must be at most %d characters", api.MaxSubjectLength))
		}
		r.ManagerIdentifier = v
	}
	if p.MessageExpiration.Set {
		v := p.MessageExpiration.Value // null means never, stored as 0
		if v < 0 || v > MaxMessageExpiration {
			probs.Add("messageExpiration", fmt.Sprintf("must be null or 0 (never) or a number of ms up to %d", int64(MaxMessageExpiration)))
		}
		r.MessageExpiration = v
	}
	p.delivery().applyTo(r, &probs)
	if p.SubscriptionApproval.Set && notNull("subscriptionApproval", p.SubscriptionApproval.Null) {
		switch a := p.SubscriptionApproval.Value; a {
		case ApprovalAutomatic, ApprovalManual:
			// Switching to AUTOMATIC leaves PENDING subscriptions pending:
			// each still needs its own decision.
			r.SubscriptionApproval = a
		default:
			probs.Add("subscriptionApproval", "must be AUTOMATIC or MANUAL")
		}
	}
	if p.Status.Set && notNull("status", p.Status.Null) {
		switch s := p.Status.Value; {
		case creating && s != StatusActive:
			probs.Add("status", "must be ACTIVE (or absent) at creation")
		case s != StatusActive && s != StatusTerminated:
			probs.Add("status", "must be ACTIVE or TERMINATED")
		}
		r.Status = p.Status.Value
	}
	return probs.Err()
}

// ApplyTo validates p as an update and writes it onto r.
func (p RoomPatch) ApplyTo(r *Room) error { return p.apply(r, false) }

// delivery is the part of p that a subscription may override.
func (p RoomPatch) delivery() DeliveryPatch {
	return DeliveryPatch{
		DeliveryDelay: p.DeliveryDelay, DeliveryDelayMultiplier: p.DeliveryDelayMultiplier,
		DeliveryAttempts: p.DeliveryAttempts, MaxDeliveryDelay: p.MaxDeliveryDelay,
		DeliveryJitter: p.DeliveryJitter, RetryPolicy: p.RetryPolicy, CircuitBreaker: p.CircuitBreaker,
	}
}

// NewRoomDefaults is a room with the defaults of a created one and no identity.
func NewRoomDefaults() Room {
	return Room{
		DeliveryDelay:           DefaultDeliveryDelay,
		DeliveryDelayMultiplier: DefaultDeliveryDelayMultiplier,
		DeliveryAttempts:        DefaultDeliveryAttempts,
		SubscriptionApproval:    ApprovalAutomatic,
		Status:                  StatusActive,
	}
}

// CreateRoom validates p, fills defaults and stores the room.
func (s *Service) CreateRoom(ctx context.Context, p RoomPatch) (Room, error) {
	now := s.now().UTC()
	r := NewRoomDefaults()
	r.ID, r.CreatedAt, r.UpdatedAt = uuid.Must(uuid.NewV7()), now, now
	if c := api.CallerFrom(ctx); !c.Admin() {
		// A manager creates rooms it manages; it may leave the field out.
		if !p.ManagerIdentifier.Set || p.ManagerIdentifier.Null {
			p.ManagerIdentifier = api.Nullable[string]{Set: true, Value: c.Subject}
		}
		if !c.Manages(p.ManagerIdentifier.Value) {
			return Room{}, api.Forbidden("managerIdentifier: a manager key creates only rooms whose managerIdentifier is its subject %q", c.Subject)
		}
	}
	if err := p.apply(&r, true); err != nil {
		return Room{}, err
	}
	if err := s.store.CreateRoom(ctx, r); err != nil {
		return Room{}, err
	}
	s.changed(r.ID)
	return r, nil
}

// Room finds a room by its id or, when ref is not a UUID, by its identifier.
func (s *Service) Room(ctx context.Context, ref string) (Room, error) {
	if id, err := uuid.Parse(ref); err == nil {
		return s.store.Room(ctx, id)
	}
	if !identifierPattern.MatchString(ref) {
		return Room{}, ErrNotFound
	}
	return s.store.RoomByIdentifier(ctx, ref)
}

// Rooms lists rooms in creation order.
func (s *Service) Rooms(ctx context.Context, page api.Page) ([]Room, error) {
	after, err := page.AfterID()
	if err != nil {
		return nil, err
	}
	q := ListQuery{Limit: page.Limit, After: after}
	if c := api.CallerFrom(ctx); !c.Admin() {
		// Each key sees only its rooms.
		q.Restricted = true
		if c.Role == api.RoleManager {
			q.ManagerIdentifier = c.Subject
		} else {
			for id := range c.Rooms {
				q.IDs = append(q.IDs, id)
			}
		}
	}
	return s.store.Rooms(ctx, q)
}

// UpdateRoom applies p to the room ref names.
func (s *Service) UpdateRoom(ctx context.Context, ref string, p RoomPatch) (Room, error) {
	r, err := s.Room(ctx, ref)
	if err != nil {
		return Room{}, err
	}
	if c := api.CallerFrom(ctx); !c.Admin() && p.ManagerIdentifier.Set && !c.Manages(p.ManagerIdentifier.Value) {
		return Room{}, api.Forbidden("managerIdentifier: only an admin key hands a room to another manager")
	}
	if err := p.apply(&r, false); err != nil {
		return Room{}, err
	}
	r.UpdatedAt = s.now().UTC()
	if err := s.store.UpdateRoom(ctx, r); err != nil {
		return Room{}, err
	}
	s.changed(r.ID)
	return r, nil
}

// DeleteRoom deletes the room ref names; see Store.DeleteRoom for force.
func (s *Service) DeleteRoom(ctx context.Context, ref string, force bool) (Room, error) {
	r, err := s.Room(ctx, ref)
	if err != nil {
		return Room{}, err
	}
	pulls, err := s.store.DeleteRoom(ctx, r.ID, force)
	if err != nil {
		return Room{}, err
	}
	s.changed(r.ID)
	if len(pulls) > 0 {
		s.cleanup.RoomDeleted(ctx, r.ID, pulls)
	}
	return r, nil
}

// EventTypeInput creates an event type.
type EventTypeInput struct {
	Identifier  string
	Description string
}

// CreateEventType adds an event type to the room ref names.
func (s *Service) CreateEventType(ctx context.Context, ref string, in EventTypeInput) (EventType, error) {
	r, err := s.Room(ctx, ref)
	if err != nil {
		return EventType{}, err
	}
	var probs api.Problems
	ValidIdentifier("identifier", in.Identifier, &probs)
	if len(in.Description) > maxDescriptionLength {
		probs.Add("description", fmt.Sprintf("must be at most %d characters", maxDescriptionLength))
	}
	if err := probs.Err(); err != nil {
		return EventType{}, err
	}
	et := EventType{
		ID:          uuid.Must(uuid.NewV7()),
		RoomID:      r.ID,
		Identifier:  in.Identifier,
		Description: in.Description,
		CreatedAt:   s.now().UTC(),
	}
	if err := s.store.CreateEventType(ctx, et); err != nil {
		return EventType{}, err
	}
	s.changed(r.ID)
	return et, nil
}

// EventType finds an event type of the room ref names by its identifier.
func (s *Service) EventType(ctx context.Context, ref, identifier string) (Room, EventType, error) {
	r, err := s.Room(ctx, ref)
	if err != nil {
		return Room{}, EventType{}, err
	}
	et, err := s.EventTypeOf(ctx, r.ID, identifier)
	if err != nil {
		return Room{}, EventType{}, err
	}
	return r, et, nil
}

// EventTypeOf finds an event type of a resolved room. A string that cannot
// be an identifier is not looked up: no event type has it, and the database
// may refuse to compare it (a NUL character, invalid UTF-8).
func (s *Service) EventTypeOf(ctx context.Context, roomID uuid.UUID, identifier string) (EventType, error) {
	if len(identifier) > maxIdentifierLength || !identifierPattern.MatchString(identifier) {
		return EventType{}, ErrEventTypeNotFound
	}
	return s.store.EventType(ctx, roomID, identifier)
}

// ValidVersion reports whether v can be a version number: from 1 to
// MaxVersion, which the database's integer column holds. Other numbers name
// no version.
func ValidVersion(v int) bool { return v >= 1 && v <= MaxVersion }

// VersionOf finds one version of a resolved event type.
func (s *Service) VersionOf(ctx context.Context, eventTypeID uuid.UUID, version int) (Version, error) {
	if !ValidVersion(version) {
		return Version{}, ErrVersionNotFound
	}
	return s.store.Version(ctx, eventTypeID, version)
}

// VersionsOf lists a resolved event type's versions, oldest first.
func (s *Service) VersionsOf(ctx context.Context, eventTypeID uuid.UUID) ([]Version, error) {
	return s.store.Versions(ctx, eventTypeID)
}

// ExistingVersions returns those of versions a resolved event type has, in
// ascending order, in one lookup.
func (s *Service) ExistingVersions(ctx context.Context, eventTypeID uuid.UUID, versions []int) ([]int, error) {
	// A number that cannot be a version is not looked up (see ValidVersion).
	valid := slices.DeleteFunc(slices.Clone(versions), func(v int) bool { return !ValidVersion(v) })
	if len(valid) == 0 {
		return nil, nil
	}
	return s.store.ExistingVersions(ctx, eventTypeID, valid)
}

// EventTypes lists the room's event types by identifier.
func (s *Service) EventTypes(ctx context.Context, ref string, page api.Page) ([]EventType, error) {
	r, err := s.Room(ctx, ref)
	if err != nil {
		return nil, err
	}
	return s.store.EventTypes(ctx, r.ID, page.Limit, page.After)
}

// DeleteEventType deletes an event type and its versions; refused while a
// subscription names it.
func (s *Service) DeleteEventType(ctx context.Context, ref, identifier string) error {
	_, et, err := s.EventType(ctx, ref, identifier)
	if err != nil {
		return err
	}
	if err := s.store.DeleteEventType(ctx, et.ID); err != nil {
		return err
	}
	s.changed(et.RoomID)
	return nil
}

// VersionInput creates a version; Version 0 means the next number.
type VersionInput struct {
	Version int
	Schema  json.RawMessage
}

// CreateVersion adds a version with its schema, checked to compile.
func (s *Service) CreateVersion(ctx context.Context, ref, eventType string, in VersionInput) (Version, error) {
	_, et, err := s.EventType(ctx, ref, eventType)
	if err != nil {
		return Version{}, err
	}
	var probs api.Problems
	if in.Version < 0 || in.Version > MaxVersion {
		probs.Add("version", fmt.Sprintf("must be a positive integer up to %d", MaxVersion))
	}
	if len(in.Schema) == 0 || string(in.Schema) == "null" {
		probs.Add("schema", "is required: a JSON Schema document")
	} else if _, err := CompileSchema(ctx, in.Schema); err != nil {
		var refused *PointerError
		if !errors.As(err, &refused) {
			return Version{}, err
		}
		probs.AddPointer("schema", "/schema"+refused.Pointer, refused.Message)
	}
	if err := probs.Err(); err != nil {
		return Version{}, err
	}
	if in.Version == 0 {
		vs, err := s.store.Versions(ctx, et.ID)
		if err != nil {
			return Version{}, err
		}
		in.Version = 1
		if len(vs) > 0 {
			in.Version = vs[len(vs)-1].Version + 1
		}
	}
	v := Version{EventTypeID: et.ID, Version: in.Version, Schema: compactJSON(in.Schema), CreatedAt: s.now().UTC()}
	if err := s.store.CreateVersion(ctx, v); err != nil {
		return Version{}, err
	}
	s.changed(et.RoomID)
	return v, nil
}

func compactJSON(raw json.RawMessage) json.RawMessage {
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return raw
	}
	return buf.Bytes()
}

// Versions lists an event type's versions, oldest first.
func (s *Service) Versions(ctx context.Context, ref, eventType string) ([]Version, error) {
	_, et, err := s.EventType(ctx, ref, eventType)
	if err != nil {
		return nil, err
	}
	return s.store.Versions(ctx, et.ID)
}

// Version finds one version of an event type.
func (s *Service) Version(ctx context.Context, ref, eventType string, version int) (Version, error) {
	_, et, err := s.EventType(ctx, ref, eventType)
	if err != nil {
		return Version{}, err
	}
	return s.VersionOf(ctx, et.ID, version)
}

// DeleteVersion deletes a version unless a subscription names it.
func (s *Service) DeleteVersion(ctx context.Context, ref, eventType string, version int) error {
	_, et, err := s.EventType(ctx, ref, eventType)
	if err != nil {
		return err
	}
	if !ValidVersion(version) {
		return ErrVersionNotFound
	}
	if err := s.store.DeleteVersion(ctx, et.ID, version); err != nil {
		return err
	}
	s.changed(et.RoomID)
	return nil
}
