package console

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/google/uuid"

	"github.com/roomhub/messaging-api/publish"
	"github.com/roomhub/messaging-api/rooms"
)

type messagesData struct {
	Rooms    []option
	Form     *form
	Events   []publish.EventResponse
	Next     string
	Room     string // the room searched
	Problem  *apiError
	Searched bool
}

// messages finds a room's messages by correlation id or event id (the
// newest when neither is given), through the message log's routes.
func (cn *Console) messages(r *request) error {
	d := messagesData{Form: newForm(r.QueryParams())}
	rs, err := list[rooms.RoomResponse](r, "/v1/rooms", url.Values{"limit": {"200"}})
	if err != nil {
		return err
	}
	d.Rooms = []option{{Value: "", Label: "(choose a room)"}}
	for _, room := range rs.Items {
		d.Rooms = append(d.Rooms, option{Value: room.ID, Label: room.Identifier})
	}
	room, q := d.Form.Get("room"), strings.TrimSpace(d.Form.Get("q"))
	if room == "" {
		return r.render(http.StatusOK, "messages", "Messages", "messages", d)
	}
	d.Room, d.Searched = room, true
	if _, err := uuid.Parse(q); err == nil {
		var ev publish.EventResponse
		err := r.api.do(http.MethodGet, roomPath(room, "messages", q), nil, &ev)
		if err == nil {
			return r.Redirect(http.StatusSeeOther, "/console/rooms/"+url.PathEscape(ev.RoomID)+"/messages/"+url.PathEscape(ev.EventID))
		}
		if p := problemOf(err); p == nil || p.Status != http.StatusNotFound {
			return r.searchFailed(d, err)
		}
	}
	query := r.listQuery(20)
	if q != "" {
		query.Set("correlationId", q)
	}
	evs, err := list[publish.EventResponse](r, roomPath(room, "messages"), query)
	if err != nil {
		return r.searchFailed(d, err)
	}
	d.Events, d.Next = evs.Items, r.nextPage(evs.NextCursor)
	return r.render(http.StatusOK, "messages", "Messages", "messages", d)
}

// searchFailed shows the API's refusal of a search on the search page.
func (r *request) searchFailed(d messagesData, err error) error {
	p := refusal(err)
	if p == nil {
		return err
	}
	d.Problem = p
	return r.render(p.Status, "messages", "Messages", "messages", d)
}

type timelineData struct {
	Room  rooms.RoomResponse
	Event publish.EventResponse
	Chart waterfall
	Rows  []timelineRow
	Final bool
}

// timeline draws one event's attempts per subscription, and reloads itself
// while attempts are still to come.
func (cn *Console) timeline(r *request) error {
	var d timelineData
	if err := r.api.do(http.MethodGet, roomPath(r.Param("room")), nil, &d.Room); err != nil {
		return err
	}
	if err := r.api.do(http.MethodGet, roomPath(r.Param("room"), "messages", r.Param("event")), nil, &d.Event); err != nil {
		return err
	}
	d.Chart = drawTimeline(d.Event, r.cn.now())
	for _, dl := range d.Event.Deliveries {
		for _, a := range dl.Attempts {
			d.Rows = append(d.Rows, timelineRow{Subscription: dl.SubscriptionID, AttemptResponse: a})
		}
	}
	d.Final = final(d.Event)
	v := r.view("Message "+short(d.Event.EventID), "messages", d)
	if !d.Final {
		v.Refresh = 2
	}
	return r.cn.render(r.Context, http.StatusOK, "timeline", v)
}
