package auth

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/roomhub/messaging-api/api"
)

// Spec is what a new key is made from.
type Spec struct {
	Name             string
	Role             string
	Subject          string
	Rooms            []GrantSpec
	PublishRateLimit *float64
	PublishBurst     *int
	ExpiresAt        *time.Time
}

// GrantSpec grants a room by id or identifier.
type GrantSpec struct {
	Room       string
	EventTypes []string
}

// Limits on a key's grants: each room is looked up when the key is made.
const (
	maxGrants          = 1000 // rooms of one key
	maxGrantEventTypes = 100  // event types of one granted room
)

// Bounds of a publish rate limit, a key's and the process default alike.
const (
	MaxPublishRate  = 1_000_000 // events per second
	MaxPublishBurst = 1_000_000 // events at once above the rate
)

// Roles are every role a key may have.
var Roles = []string{api.RoleAdmin, api.RoleManager, api.RolePublisher, api.RoleSubscriber}

func validRole(r string) bool {
	for _, x := range Roles {
		if x == r {
			return true
		}
	}
	return false
}

func (s *Service) validate(ctx context.Context, spec Spec) (Key, error) {
	var probs api.Problems
	k := Key{Name: strings.TrimSpace(spec.Name), Role: spec.Role, Subject: strings.TrimSpace(spec.Subject),
		PublishRateLimit: spec.PublishRateLimit, PublishBurst: spec.PublishBurst, ExpiresAt: spec.ExpiresAt}
	if k.Name == "" || len(k.Name) > 200 {
		probs.Add("name", "is required, at most 200 characters")
	}
	if !validRole(k.Role) {
		probs.Add("role", "must be one of admin, manager, publisher, subscriber")
	}
	if len(k.Subject) > api.MaxSubjectLength {
		probs.Add("subject", fmt.Sprintf("must be at most %d characters", api.MaxSubjectLength))
	} else if k.Subject == "" && (k.Role == api.RoleManager || k.Role == api.RoleSubscriber) {
		probs.Add("subject", "is required for "+k.Role+" keys (the managerIdentifier of the rooms a manager manages; the owner of a subscriber's subscriptions)")
	}
	grants := k.Role == api.RolePublisher || k.Role == api.RoleSubscriber
	switch {
	case !grants && len(spec.Rooms) > 0:
		probs.Add("rooms", "only publisher and subscriber keys are granted rooms")
	case grants && len(spec.Rooms) == 0:
		probs.Add("rooms", "is required for "+k.Role+" keys: the rooms the key may use")
	case len(spec.Rooms) > maxGrants:
		probs.Add("rooms", fmt.Sprintf("must list at most %d rooms", maxGrants))
	}
	grantList := spec.Rooms
	if !grants || len(grantList) > maxGrants {
		grantList = nil // refused already: no lookup per room
	}
	for i, g := range grantList {
		field := fmt.Sprintf("rooms[%d]", i)
		id, err := s.rooms.RoomID(ctx, g.Room)
		switch {
		case api.IsNotFound(err):
			probs.Add(field+".roomId", "no such room")
			continue
		case err != nil:
			return Key{}, err
		}
		if k.Role != api.RolePublisher && len(g.EventTypes) > 0 {
			probs.Add(field+".eventTypes", "only publisher keys are limited to event types")
		}
		if len(g.EventTypes) > maxGrantEventTypes {
			probs.Add(field+".eventTypes", fmt.Sprintf("must list at most %d event types", maxGrantEventTypes))
			continue
		}
		for j, et := range g.EventTypes {
			if strings.TrimSpace(et) == "" || len(et) > 200 {
				probs.Add(fmt.Sprintf("%s.eventTypes[%d]", field, j), "must be an event type identifier")
			}
		}
		k.Rooms = append(k.Rooms, Grant{RoomID: id, EventTypes: g.EventTypes})
	}
	if r := k.PublishRateLimit; r != nil && (*r <= 0 || *r > MaxPublishRate) {
		probs.Add("publishRateLimit", fmt.Sprintf("must be > 0 and at most %d events per second", MaxPublishRate))
	}
	if b := k.PublishBurst; b != nil && (*b < 1 || *b > MaxPublishBurst) {
		probs.Add("publishBurst", fmt.Sprintf("must be between 1 and %d", MaxPublishBurst))
	}
	if k.ExpiresAt != nil && !k.ExpiresAt.After(s.now()) {
		probs.Add("expiresAt", "must be in the future")
	}
	return k, probs.Err()
}
