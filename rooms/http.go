package rooms

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/roomhub/messaging-api/api"
	"github.com/roomhub/messaging-api/auth"
)

// Routes registers the room, event type and version endpoints under g (/v1).
func Routes(g *echo.Group, s *Service) {
	h := handlers{s: s}
	// Managers change the rooms they manage (a new room's manager is checked
	// on the body); every role reads the rooms it reaches, and lists show
	// each key only those.
	manage := auth.InRoom(api.RoleManager)
	read := auth.InRoom(api.RoleManager, api.RolePublisher, api.RoleSubscriber)
	auth.Handle(g, http.MethodPost, "/rooms", h.createRoom, auth.Anywhere(api.RoleManager))
	auth.Handle(g, http.MethodGet, "/rooms", h.listRooms, auth.Anywhere(api.RoleManager, api.RolePublisher, api.RoleSubscriber))
	auth.Handle(g, http.MethodGet, "/rooms/:roomId", h.getRoom, read)
	auth.Handle(g, http.MethodPatch, "/rooms/:roomId", h.updateRoom, manage)
	auth.Handle(g, http.MethodDelete, "/rooms/:roomId", h.deleteRoom, manage)

	auth.Handle(g, http.MethodPost, "/rooms/:roomId/event-types", h.createEventType, manage)
	auth.Handle(g, http.MethodGet, "/rooms/:roomId/event-types", h.listEventTypes, read)
	auth.Handle(g, http.MethodGet, "/rooms/:roomId/event-types/:eventType", h.getEventType, read)
	auth.Handle(g, http.MethodDelete, "/rooms/:roomId/event-types/:eventType", h.deleteEventType, manage)

	auth.Handle(g, http.MethodPost, "/rooms/:roomId/event-types/:eventType/versions", h.createVersion, manage)
	auth.Handle(g, http.MethodGet, "/rooms/:roomId/event-types/:eventType/versions", h.listVersions, read)
	auth.Handle(g, http.MethodGet, "/rooms/:roomId/event-types/:eventType/versions/:version", h.getVersion, read)
	auth.Handle(g, http.MethodDelete, "/rooms/:roomId/event-types/:eventType/versions/:version", h.deleteVersion, manage)
}

type handlers struct{ s *Service }

// roomRequest is the body of POST and PATCH /rooms (a JSON merge patch).
type roomRequest struct {
	Identifier              api.Nullable[string]         `json:"identifier"`
	ManagerIdentifier       api.Nullable[string]         `json:"managerIdentifier"`
	MessageExpiration       api.Nullable[int64]          `json:"messageExpiration"`
	DeliveryDelay           api.Nullable[int64]          `json:"deliveryDelay"`
	DeliveryDelayMultiplier api.Nullable[float64]        `json:"deliveryDelayMultiplier"`
	DeliveryAttempts        api.Nullable[int]            `json:"deliveryAttempts"`
	MaxDeliveryDelay        api.Nullable[int64]          `json:"maxDeliveryDelay"`
	DeliveryJitter          api.Nullable[float64]        `json:"deliveryJitter"`
	RetryPolicy             api.Nullable[RetryPolicy]    `json:"retryPolicy"`
	CircuitBreaker          api.Nullable[CircuitBreaker] `json:"circuitBreaker"`
	SubscriptionApproval    api.Nullable[Approval]       `json:"subscriptionApproval"`
	Status                  api.Nullable[Status]         `json:"status"`
}

func (r roomRequest) patch() RoomPatch {
	return RoomPatch(r)
}

// RoomResponse is a room as the API shows it.
type RoomResponse struct {
	ID                      string       `json:"id"`
	Identifier              string       `json:"identifier"`
	ManagerIdentifier       string       `json:"managerIdentifier"`
	MessageExpiration       *int64       `json:"messageExpiration"`
	DeliveryDelay           int64        `json:"deliveryDelay"`
	DeliveryDelayMultiplier float64      `json:"deliveryDelayMultiplier"`
	DeliveryAttempts        int          `json:"deliveryAttempts"`
	MaxDeliveryDelay        *int64       `json:"maxDeliveryDelay"`
	DeliveryJitter          float64      `json:"deliveryJitter"`
	RetryPolicy             *RetryPolicy `json:"retryPolicy"`
	CircuitBreaker          Breaker      `json:"circuitBreaker"`
	SubscriptionApproval    Approval     `json:"subscriptionApproval"`
	Status                  Status       `json:"status"`
	Address                 string       `json:"address"`
	CreatedAt               time.Time    `json:"createdAt"`
	UpdatedAt               time.Time    `json:"updatedAt"`
}

func toRoomResponse(r Room) RoomResponse {
	var exp *int64
	if r.MessageExpiration > 0 {
		v := r.MessageExpiration
		exp = &v
	}
	var maxDelay *int64
	if r.MaxDeliveryDelay > 0 {
		v := r.MaxDeliveryDelay
		maxDelay = &v
	}
	return RoomResponse{
		ID:                      r.ID.String(),
		Identifier:              r.Identifier,
		ManagerIdentifier:       r.ManagerIdentifier,
		MessageExpiration:       exp,
		DeliveryDelay:           r.DeliveryDelay,
		DeliveryDelayMultiplier: r.DeliveryDelayMultiplier,
		DeliveryAttempts:        r.DeliveryAttempts,
		MaxDeliveryDelay:        maxDelay,
		DeliveryJitter:          r.DeliveryJitter,
		RetryPolicy:             r.RetryPolicy,
		CircuitBreaker:          r.Breaker(),
		SubscriptionApproval:    r.SubscriptionApproval,
		Status:                  r.Status,
		Address:                 r.Address(),
		CreatedAt:               r.CreatedAt,
		UpdatedAt:               r.UpdatedAt,
	}
}

func (h handlers) createRoom(c echo.Context) error {
	var req roomRequest
	if err := api.Decode(c, &req); err != nil {
		return err
	}
	r, err := h.s.CreateRoom(c.Request().Context(), req.patch())
	if err != nil {
		return err
	}
	c.Response().Header().Set(echo.HeaderLocation, "/v1/rooms/"+r.ID.String())
	return c.JSON(http.StatusCreated, toRoomResponse(r))
}

func (h handlers) listRooms(c echo.Context) error {
	page, err := api.ParsePage(c, 50, 500)
	if err != nil {
		return err
	}
	rs, err := h.s.Rooms(c.Request().Context(), page)
	if err != nil {
		return err
	}
	out := api.List[RoomResponse]{Items: make([]RoomResponse, len(rs))}
	for i, r := range rs {
		out.Items[i] = toRoomResponse(r)
	}
	if len(rs) == page.Limit {
		out.NextCursor = api.EncodeCursor(rs[len(rs)-1].ID.String())
	}
	return c.JSON(http.StatusOK, out)
}

func (h handlers) getRoom(c echo.Context) error {
	r, err := h.s.Room(c.Request().Context(), c.Param("roomId"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, toRoomResponse(r))
}

func (h handlers) updateRoom(c echo.Context) error {
	var req roomRequest
	if err := api.Decode(c, &req); err != nil {
		return err
	}
	r, err := h.s.UpdateRoom(c.Request().Context(), c.Param("roomId"), req.patch())
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, toRoomResponse(r))
}

func (h handlers) deleteRoom(c echo.Context) error {
	force, err := ParseBoolParam(c, "force")
	if err != nil {
		return err
	}
	if _, err := h.s.DeleteRoom(c.Request().Context(), c.Param("roomId"), force); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

// ParseBoolParam reads an optional true/false query parameter.
func ParseBoolParam(c echo.Context, name string) (bool, error) {
	s := c.QueryParam(name)
	if s == "" {
		return false, nil
	}
	v, err := strconv.ParseBool(s)
	if err != nil {
		return false, api.Invalid(name, "must be true or false")
	}
	return v, nil
}

type eventTypeRequest struct {
	Identifier  string `json:"identifier"`
	Description string `json:"description"`
}

// EventTypeResponse is an event type as the API shows it.
type EventTypeResponse struct {
	ID          string    `json:"id"`
	RoomID      string    `json:"roomId"`
	Identifier  string    `json:"identifier"`
	Description string    `json:"description"`
	CreatedAt   time.Time `json:"createdAt"`
}

func toEventTypeResponse(et EventType) EventTypeResponse {
	return EventTypeResponse{
		ID:          et.ID.String(),
		RoomID:      et.RoomID.String(),
		Identifier:  et.Identifier,
		Description: et.Description,
		CreatedAt:   et.CreatedAt,
	}
}

func (h handlers) createEventType(c echo.Context) error {
	var req eventTypeRequest
	if err := api.Decode(c, &req); err != nil {
		return err
	}
	et, err := h.s.CreateEventType(c.Request().Context(), c.Param("roomId"), EventTypeInput(req))
	if err != nil {
		return err
	}
	c.Response().Header().Set(echo.HeaderLocation, "/v1/rooms/"+et.RoomID.String()+"/event-types/"+et.Identifier)
	return c.JSON(http.StatusCreated, toEventTypeResponse(et))
}

func (h handlers) listEventTypes(c echo.Context) error {
	page, err := api.ParsePage(c, 100, 500)
	if err != nil {
		return err
	}
	ets, err := h.s.EventTypes(c.Request().Context(), c.Param("roomId"), page)
	if err != nil {
		return err
	}
	out := api.List[EventTypeResponse]{Items: make([]EventTypeResponse, len(ets))}
	for i, et := range ets {
		out.Items[i] = toEventTypeResponse(et)
	}
	if len(ets) == page.Limit {
		out.NextCursor = api.EncodeCursor(ets[len(ets)-1].Identifier)
	}
	return c.JSON(http.StatusOK, out)
}

func (h handlers) getEventType(c echo.Context) error {
	_, et, err := h.s.EventType(c.Request().Context(), c.Param("roomId"), c.Param("eventType"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, toEventTypeResponse(et))
}

func (h handlers) deleteEventType(c echo.Context) error {
	if err := h.s.DeleteEventType(c.Request().Context(), c.Param("roomId"), c.Param("eventType")); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

type versionRequest struct {
	Version api.Nullable[int] `json:"version"` // absent: the next number
	Schema  json.RawMessage   `json:"schema"`
}

// VersionResponse is a version of an event type, with its schema.
type VersionResponse struct {
	EventType string          `json:"eventType"`
	Version   int             `json:"version"`
	Schema    json.RawMessage `json:"schema"`
	CreatedAt time.Time       `json:"createdAt"`
}

func toVersionResponse(eventType string, v Version) VersionResponse {
	return VersionResponse{EventType: eventType, Version: v.Version, Schema: v.Schema, CreatedAt: v.CreatedAt}
}

func (h handlers) createVersion(c echo.Context) error {
	var req versionRequest
	if err := api.Decode(c, &req); err != nil {
		return err
	}
	if req.Version.Set && (req.Version.Null || req.Version.Value < 1) {
		return api.Invalid("version", "must be a positive integer")
	}
	in := VersionInput{Version: req.Version.Value, Schema: req.Schema}
	v, err := h.s.CreateVersion(c.Request().Context(), c.Param("roomId"), c.Param("eventType"), in)
	if err != nil {
		return err
	}
	c.Response().Header().Set(echo.HeaderLocation, fmt.Sprintf("%s/%d", c.Request().URL.Path, v.Version))
	return c.JSON(http.StatusCreated, toVersionResponse(c.Param("eventType"), v))
}

func (h handlers) listVersions(c echo.Context) error {
	vs, err := h.s.Versions(c.Request().Context(), c.Param("roomId"), c.Param("eventType"))
	if err != nil {
		return err
	}
	out := api.List[VersionResponse]{Items: make([]VersionResponse, len(vs))}
	for i, v := range vs {
		out.Items[i] = toVersionResponse(c.Param("eventType"), v)
	}
	return c.JSON(http.StatusOK, out)
}

func versionParam(c echo.Context) (int, error) {
	v, err := strconv.Atoi(c.Param("version"))
	if err != nil || !ValidVersion(v) {
		return 0, ErrVersionNotFound
	}
	return v, nil
}

func (h handlers) getVersion(c echo.Context) error {
	n, err := versionParam(c)
	if err != nil {
		return err
	}
	v, err := h.s.Version(c.Request().Context(), c.Param("roomId"), c.Param("eventType"), n)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, toVersionResponse(c.Param("eventType"), v))
}

func (h handlers) deleteVersion(c echo.Context) error {
	n, err := versionParam(c)
	if err != nil {
		return err
	}
	if err := h.s.DeleteVersion(c.Request().Context(), c.Param("roomId"), c.Param("eventType"), n); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}
