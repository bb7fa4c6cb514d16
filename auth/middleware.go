package auth

import (
	"context"
	"fmt"
	"net/http"
	"slices"
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
// The zero Rule admits admins only.
type Rule struct {
	roles []string
	scope scope
}

// Admins lets only admin keys use a route.
func Admins() Rule { return Rule{} }

// Anywhere lets roles use a route that names no room; any rows it touches
// are the handler's to restrict.
func Anywhere(roles ...string) Rule { return Rule{roles: roles, scope: anywhere} }

// InRoom lets roles use a route of a room the key manages (managers) or is
// granted (publishers, subscribers).
func InRoom(roles ...string) Rule { return Rule{roles: roles, scope: inRoom} }

// InSubscription is InRoom for a route of one subscription, which a
// subscriber key must also own.
func InSubscription(roles ...string) Rule { return Rule{roles: roles, scope: inSubscription} }

// Handle declares a route of g with who may call it: the one place a route
// and its permission are written. mw run before the rule is applied: those
// that shape the path parameters it reads (api.Verbs).
func Handle(g *echo.Group, method, path string, h echo.HandlerFunc, rule Rule, mw ...echo.MiddlewareFunc) *echo.Route {
	return g.Add(method, path, h, slices.Concat(mw, []echo.MiddlewareFunc{rule.enforce})...)
}

// Verb is a custom method of a resource, POST …/{id}:Name, with its rule.
type Verb struct {
	Name    string
	Handler echo.HandlerFunc
	Rule    Rule
}

// VerbsRoutePrefix starts the Name of a route HandleVerbs declares; the
// verbs follow, comma-separated.
const VerbsRoutePrefix = "verbs:"

// HandleVerbs declares the custom methods of the resource whose path ends in
// the parameter param, each with its own rule beside it. echo routes no
// literal after a parameter, so they share one route (api.Verbs cuts the
// verb off the parameter before the verb's rule runs); the route's Name
// lists them, for whoever checks every route's rule.
func HandleVerbs(g *echo.Group, path, param string, verbs ...Verb) *echo.Route {
	names := make([]string, len(verbs))
	byName := make(map[string]echo.HandlerFunc, len(verbs))
	for i, v := range verbs {
		names[i] = v.Name
		byName[v.Name] = v.Rule.enforce(v.Handler)
	}
	r := g.Add(http.MethodPost, path, func(c echo.Context) error { return byName[api.Verb(c)](c) }, api.Verbs(param, names...))
	r.Name = VerbsRoutePrefix + strings.Join(names, ",")
	return r
}

// guardKey holds the guard Middleware leaves for the route's rule.
const guardKey = "auth.guard"

// guard is what a route's rule needs to decide: who calls and how to look
// up the rows the path names.
type guard struct {
	caller *api.Caller
	res    Resolver
}

// enforce applies r to a request Middleware authenticated. Without a guard
// authentication is off (AUTH_DISABLED) and every route is open. A probe
// (WithProbe) that the rule admits ends here.
func (r Rule) enforce(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if g, ok := c.Get(guardKey).(guard); ok {
			if err := authorize(c.Request().Context(), c, g.caller, g.res, r); err != nil {
				return err
			}
		}
		if probing(c.Request().Context()) {
			return c.NoContent(http.StatusNoContent)
		}
		return next(c)
	}
}

// Middleware authenticates every request it wraps, known route or not, by
// its Authorization header, or by the session key its context carries
// (WithSessionKey); each route's own Rule (declared with Handle) then
// authorizes it.
func (svc *Service) Middleware(res Resolver) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			req := c.Request()
			var key Key
			var err error
			if id, ok := sessionKeyID(req.Context()); ok {
				key, err = svc.AuthenticateID(req.Context(), id)
			} else {
				key, err = svc.Authenticate(req.Context(), req.Header.Get(echo.HeaderAuthorization))
			}
			if err != nil {
				return err
			}
			caller := key.Caller()
			c.SetRequest(req.WithContext(api.WithCaller(req.Context(), caller)))
			c.Set(guardKey, guard{caller: caller, res: res})
			return next(c)
		}
	}
}

// authorize decides whether caller may use the route of c under rule.
func authorize(ctx context.Context, c echo.Context, caller *api.Caller, res Resolver, rule Rule) error {
	if caller.Admin() {
		return nil
	}
	allowed := false
	for _, r := range rule.roles {
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
