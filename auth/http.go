package auth

import (
	"fmt"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/roomhub/messaging-api/api"
)

// Routes registers the API key endpoints under g (/v1).
func (svc *Service) Routes(g *echo.Group) {
	Handle(g, http.MethodPost, "/api-keys", svc.create, Admins())
	Handle(g, http.MethodGet, "/api-keys", svc.list, Admins())
	Handle(g, http.MethodGet, "/api-keys/current", svc.current, Anywhere(api.RoleManager, api.RolePublisher, api.RoleSubscriber))
	Handle(g, http.MethodGet, "/api-keys/:keyId", svc.get, Admins())
	Handle(g, http.MethodDelete, "/api-keys/:keyId", svc.revoke, Admins())
}

// GrantBody is a room grant of a key, in requests and answers.
type GrantBody struct {
	RoomID     string   `json:"roomId"`
	EventTypes []string `json:"eventTypes,omitempty"`
}

type createRequest struct {
	Name             string      `json:"name"`
	Role             string      `json:"role"`
	Subject          string      `json:"subject"`
	Rooms            []GrantBody `json:"rooms"`
	PublishRateLimit *float64    `json:"publishRateLimit"`
	PublishBurst     *int        `json:"publishBurst"`
	ExpiresAt        *time.Time  `json:"expiresAt"`
}

// KeyResponse is an API key as the API shows it: never its token but in the
// answer that creates it.
type KeyResponse struct {
	ID               string      `json:"id"`
	Name             string      `json:"name"`
	Role             string      `json:"role"`
	Subject          string      `json:"subject"`
	Rooms            []GrantBody `json:"rooms"`
	PublishRateLimit *float64    `json:"publishRateLimit"`
	PublishBurst     *int        `json:"publishBurst"`
	Prefix           string      `json:"prefix"`
	CreatedAt        time.Time   `json:"createdAt"`
	ExpiresAt        *time.Time  `json:"expiresAt"`
	RevokedAt        *time.Time  `json:"revokedAt"`
	// Key is the token itself, only in the answer to its creation.
	Key string `json:"key,omitempty"`
}

func toResponse(k Key) KeyResponse {
	r := KeyResponse{
		ID: k.ID.String(), Name: k.Name, Role: k.Role, Subject: k.Subject, Rooms: []GrantBody{},
		PublishRateLimit: k.PublishRateLimit, PublishBurst: k.PublishBurst, Prefix: k.Prefix,
		CreatedAt: k.CreatedAt, ExpiresAt: k.ExpiresAt, RevokedAt: k.RevokedAt,
	}
	for _, g := range k.Rooms {
		r.Rooms = append(r.Rooms, GrantBody{RoomID: g.RoomID.String(), EventTypes: g.EventTypes})
	}
	return r
}

func (svc *Service) create(c echo.Context) error {
	var req createRequest
	if err := api.Decode(c, &req); err != nil {
		return err
	}
	spec := Spec{Name: req.Name, Role: req.Role, Subject: req.Subject,
		PublishRateLimit: req.PublishRateLimit, PublishBurst: req.PublishBurst, ExpiresAt: req.ExpiresAt}
	for _, g := range req.Rooms {
		spec.Rooms = append(spec.Rooms, GrantSpec{Room: g.RoomID, EventTypes: g.EventTypes})
	}
	k, token, err := svc.Create(c.Request().Context(), spec)
	if err != nil {
		return err
	}
	r := toResponse(k)
	r.Key = token
	c.Response().Header().Set(echo.HeaderLocation, "/v1/api-keys/"+k.ID.String())
	c.Response().Header().Set(echo.HeaderCacheControl, "no-store")
	return c.JSON(http.StatusCreated, r)
}

func (svc *Service) list(c echo.Context) error {
	page, err := api.ParsePage(c, 50, 500)
	if err != nil {
		return err
	}
	ks, err := svc.Keys(c.Request().Context(), page)
	if err != nil {
		return err
	}
	out := api.List[KeyResponse]{Items: make([]KeyResponse, len(ks))}
	for i, k := range ks {
		out.Items[i] = toResponse(k)
	}
	if len(ks) == page.Limit {
		out.NextCursor = api.EncodeCursor(ks[len(ks)-1].ID.String())
	}
	return c.JSON(http.StatusOK, out)
}

func (svc *Service) get(c echo.Context) error {
	k, err := svc.Key(c.Request().Context(), c.Param("keyId"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, toResponse(k))
}

// current describes the key the request was made with.
func (svc *Service) current(c echo.Context) error {
	caller := api.CallerFrom(c.Request().Context())
	if caller == nil {
		return fmt.Errorf("current API key %w: authentication is disabled on this service", api.ErrNotFound)
	}
	k, err := svc.store.Key(c.Request().Context(), caller.KeyID)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, toResponse(k))
}

func (svc *Service) revoke(c echo.Context) error {
	k, err := svc.Revoke(c.Request().Context(), c.Param("keyId"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, toResponse(k))
}
