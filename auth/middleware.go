package auth

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/roomhub/messaging-api/api"
)

// Resolver answers what the rules need to know about the rows a path names.
type Resolver interface {
	// Room resolves a room reference (id or identifier).
	Room(ctx context.Context, ref string) (id uuid.UUID, managerIdentifier string, err error)
	// SubscriptionOwner is the owner of a subscription of the room ref names.
	SubscriptionOwner(ctx context.Context, roomRef, id string) (string, error)
}

// scope says which rows of a route a non-admin key must be entitled to.
type scope int

const (
	// anywhere: the route names no room.
	anywhere scope = iota
	// inRoom: managers must manage the room; publishers and subscribers
	// must be granted it.
	inRoom
	// inSubscription: as inRoom, and a subscriber must own the subscription.
	inSubscription
)

// Rule lets the listed roles (admins always) use a route within its scope.
type Rule struct {
	Roles []string
	scope scope
}

const (
	m, p, s = api.RoleManager, api.RolePublisher, api.RoleSubscriber
)

const (
	room = "/v1/rooms/:roomId"
	sub  = room + "/subscriptions/:subscriptionId"
)

// Rules maps "METHOD route" (echo's route template) to who may call it. A
// route without a rule is open to admins only; a test checks every route
// has one.
var Rules = map[string]Rule{
	"POST /v1/api-keys":          {},
	"GET /v1/api-keys":           {},
	"GET /v1/api-keys/:keyId":    {},
	"DELETE /v1/api-keys/:keyId": {},
	"GET /v1/api-keys/current":   {[]string{m, p, s}, anywhere},

	"POST /v1/retry-schedule\\:preview": {[]string{m, p, s}, anywhere},

	// Rooms: managers create rooms they manage (checked on the body); lists
	// show each key only its rooms.
	"POST /v1/rooms":                                               {[]string{m}, anywhere},
	"GET /v1/rooms":                                                {[]string{m, p, s}, anywhere},
	"GET " + room:                                                  {[]string{m, p, s}, inRoom},
	"PATCH " + room:                                                {[]string{m}, inRoom},
	"DELETE " + room:                                               {[]string{m}, inRoom},
	"POST " + room + "/event-types":                                {[]string{m}, inRoom},
	"GET " + room + "/event-types":                                 {[]string{m, p, s}, inRoom},
	"GET " + room + "/event-types/:eventType":                      {[]string{m, p, s}, inRoom},
	"DELETE " + room + "/event-types/:eventType":                   {[]string{m}, inRoom},
	"POST " + room + "/event-types/:eventType/versions":            {[]string{m}, inRoom},
	"GET " + room + "/event-types/:eventType/versions":             {[]string{m, p, s}, inRoom},
	"GET " + room + "/event-types/:eventType/versions/:version":    {[]string{m, p, s}, inRoom},
	"DELETE " + room + "/event-types/:eventType/versions/:version": {[]string{m}, inRoom},

	// Publishing (event types checked on the body) and the message log.
	"POST " + room + "/messages":         {[]string{p}, inRoom},
	"POST " + room + "/messages\\:batch": {[]string{p}, inRoom},
	"GET " + room + "/messages":          {[]string{m}, inRoom},
	"GET " + room + "/messages/:eventId": {[]string{m}, inRoom},

	// Subscriptions: subscribers create and list their own.
	"POST " + room + "/subscriptions":               {[]string{m, s}, inRoom},
	"GET " + room + "/subscriptions":                {[]string{m, s}, inRoom},
	"GET " + sub:                                    {[]string{m, s}, inSubscription},
	"PATCH " + sub:                                  {[]string{m, s}, inSubscription},
	"DELETE " + sub:                                 {[]string{m, s}, inSubscription},
	"POST " + sub + "/secret\\:rotate":              {[]string{m, s}, inSubscription},
	"GET " + sub + "/retry-schedule":                {[]string{m, s}, inSubscription},
	"GET " + sub + "/deliveries":                    {[]string{m, s}, inSubscription},
	"GET " + sub + "/dead-letters":                  {[]string{m, s}, inSubscription},
	"POST " + sub + "/dead-letters\\:replay":        {[]string{m, s}, inSubscription},
	"GET " + sub + "/dead-letters/:deadLetterId":    {[]string{m, s}, inSubscription},
	"POST " + sub + "/dead-letters/:deadLetterId":   {[]string{m, s}, inSubscription},
	"DELETE " + sub + "/dead-letters/:deadLetterId": {[]string{m, s}, inSubscription},

	// Pulling is the subscriber's own business (and the admin's).
	"POST " + sub + "/pull":                {[]string{s}, inSubscription},
	"POST " + sub + "/ack":                 {[]string{s}, inSubscription},
	"POST " + sub + "/nack":                {[]string{s}, inSubscription},
	"POST " + sub + "/modify-ack-deadline": {[]string{s}, inSubscription},
}

// Middleware authenticates every request it wraps and applies Rules.
func (svc *Service) Middleware(res Resolver) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			req := c.Request()
			key, err := svc.Authenticate(req.Context(), req.Header.Get(echo.HeaderAuthorization))
			if err != nil {
				return err
			}
			caller := key.Caller()
			ctx := api.WithCaller(req.Context(), caller)
			c.SetRequest(req.WithContext(ctx))
			if err := authorize(ctx, c, caller, res); err != nil {
				return err
			}
			return next(c)
		}
	}
}

func authorize(ctx context.Context, c echo.Context, caller *api.Caller, res Resolver) error {
	if caller.Admin() {
		return nil
	}
	rule, ok := Rules[c.Request().Method+" "+c.Path()]
	if !ok && c.Get(echo.ContextKeyHeaderAllow) != nil {
		// A known path without this method: the router answers 405 with
		// the methods it has, which the API description lists anyway.
		return nil
	}
	if !ok {
		// Unknown routes (and any route someone forgot to list) are closed.
		return echo.NewHTTPError(http.StatusNotFound, "no such route")
	}
	allowed := false
	for _, r := range rule.Roles {
		allowed = allowed || r == caller.Role
	}
	if !allowed {
		return api.Forbidden("a %s key may not %s %s", caller.Role, c.Request().Method, strings.TrimPrefix(c.Path(), "/v1"))
	}
	if rule.scope == anywhere {
		return nil
	}
	// One answer whether the room exists or not: nothing about rooms outside
	// the key's reach leaks.
	id, manager, err := res.Room(ctx, c.Param("roomId"))
	if err != nil && !api.IsNotFound(err) {
		return err
	}
	found := err == nil
	switch caller.Role {
	case api.RoleManager:
		if !found || !caller.Manages(manager) {
			return api.Forbidden("this key does not manage room %q", c.Param("roomId"))
		}
	default:
		if !found || !caller.Granted(id) {
			return api.Forbidden("room %q is not granted to this key", c.Param("roomId"))
		}
	}
	if rule.scope == inSubscription && caller.Role == api.RoleSubscriber {
		owner, err := res.SubscriptionOwner(ctx, c.Param("roomId"), c.Param("subscriptionId"))
		if err != nil && !api.IsNotFound(err) {
			return err
		}
		if err != nil || owner != caller.Subject {
			// Another subscriber's subscription looks like none at all.
			return fmt.Errorf("subscription %w", api.ErrNotFound)
		}
	}
	return nil
}
