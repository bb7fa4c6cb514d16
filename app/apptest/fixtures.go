package apptest

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/oapi-codegen/nullable"

	"github.com/roomhub/messaging-api/client"
)

// OrderSchema is the schema of the order.created versions Seed creates.
const OrderSchema = `{"type":"object","required":["orderId"],"properties":{"orderId":{"type":"string"}}}`

// Seed creates room "orders" (manager team-a, messages expire after 60 s)
// with event type order.created, versions 1 and 2, and returns the room id.
func (a *API) Seed(t testing.TB) string {
	t.Helper()
	c, ctx := a.Client(), context.Background()
	manager := "team-a"
	room, err := c.CreateRoomWithResponse(ctx, client.RoomCreate{
		Identifier: "orders", ManagerIdentifier: &manager, MessageExpiration: nullable.NewNullableWithValue[int64](60000),
	})
	id := Must(t, room, err, room.JSON201).Id.String()
	et, err := c.CreateEventTypeWithResponse(ctx, "orders", client.EventTypeCreate{Identifier: "order.created"})
	Must(t, et, err, et.JSON201)
	one := 1
	for _, v := range []*int{&one, nil} { // version 1 by number, then the next one
		r, err := c.CreateVersionWithResponse(ctx, "orders", "order.created", client.VersionCreate{Version: v, Schema: json.RawMessage(OrderSchema)})
		Must(t, r, err, r.JSON201)
	}
	return id
}

// Fields lists the fields a problem answer names.
func Fields(t testing.TB, r Response) []string {
	t.Helper()
	var out []string
	errs, _ := r.JSON(t)["errors"].([]any)
	for _, e := range errs {
		f, _ := e.(map[string]any)["field"].(string)
		out = append(out, f)
	}
	return out
}

// NamesField says whether the problem answer r names field.
func NamesField(t testing.TB, r Response, field string) bool {
	t.Helper()
	return slices.Contains(Fields(t, r), field)
}

// WantField fails unless r is a 422 naming field.
func WantField(t testing.TB, r Response, field string) {
	t.Helper()
	Want(t, r, http.StatusUnprocessableEntity)
	if f := Fields(t, r); !slices.Contains(f, field) {
		t.Fatalf("422 names %v, want %q; body: %s", f, field, r.Body)
	}
}

// Nest nests {"items": ...} n deep around inner.
func Nest(n int, inner string) string {
	return strings.Repeat(`{"items":`, n) + inner + strings.Repeat(`}`, n)
}

// Repeat joins n copies of elem, each with %d replaced by its index.
func Repeat(n int, elem string) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = strings.ReplaceAll(elem, "%d", strconv.Itoa(i))
	}
	return strings.Join(parts, ",")
}
