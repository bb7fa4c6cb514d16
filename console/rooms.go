package console

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/roomhub/messaging-api/publish"
	"github.com/roomhub/messaging-api/retry"
	"github.com/roomhub/messaging-api/rooms"
	"github.com/roomhub/messaging-api/subscriptions"
)

func itoa(n int) string { return strconv.Itoa(n) }

func optInt64(p *int64) string {
	if p == nil {
		return ""
	}
	return strconv.FormatInt(*p, 10)
}

type roomsData struct {
	Rooms     []rooms.RoomResponse
	Next      string
	MayCreate bool
	Form      *form
}

func (cn *Console) rooms(r *request) error {
	return r.roomsPage(newForm(nil), http.StatusOK)
}

func (r *request) roomsPage(f *form, status int) error {
	page, err := list[rooms.RoomResponse](r, "/v1/rooms", r.listQuery(pageSize))
	if err != nil {
		return err
	}
	d := roomsData{Rooms: page.Items, Next: r.nextPage(page.NextCursor), MayCreate: r.api.may(http.MethodPost, "/v1/rooms"), Form: f}
	return r.render(status, "rooms", "Rooms", "rooms", d)
}

func (cn *Console) createRoom(r *request) error {
	f := newForm(r.formValues())
	b := body{}
	b.texts(f, omit, "identifier", "managerIdentifier", "subscriptionApproval")
	b.numbers(f, omit, "messageExpiration", "deliveryDelay", "deliveryDelayMultiplier", "deliveryAttempts")
	var room rooms.RoomResponse
	if err := r.api.do(http.MethodPost, "/v1/rooms", b, &room); err != nil {
		if p := refusal(err); p != nil {
			return r.roomsPage(f.refused(p), p.Status)
		}
		return err
	}
	return r.Redirect(http.StatusSeeOther, "/console/rooms/"+room.ID+"?done=room-created")
}

// schedule is a retry schedule with its chart.
type schedule struct {
	Schedule retry.ScheduleResponse
	Chart    chart
}

func newSchedule(s retry.ScheduleResponse) *schedule {
	return &schedule{Schedule: s, Chart: retryChart(s)}
}

type roomData struct {
	Room            rooms.RoomResponse
	EventTypes      []rooms.EventTypeResponse
	Subs            []subscriptions.Response
	SubsNext        string
	Status          string // the subscriptions listed have it ("": all)
	Statuses        []option
	MayManage       bool // change the room, its event types
	MayPublish      bool
	MaySubs         bool // list and create subscriptions
	MayLog          bool // read the message log
	Edit, NewType   *form
	Schedule        *schedule
	SchedulePreview bool // the schedule is of the form's unsaved values
}

// roomPath is the API path of the room id.
func roomPath(id string, more ...string) string {
	return path(append([]string{"rooms", id}, more...)...)
}

func (cn *Console) room(r *request) error {
	return r.roomPage(nil, nil, nil, http.StatusOK)
}

// roomPage renders the room page: edit and newType are the forms to show
// again with the API's answer (nil: fresh ones), sched a previewed schedule.
func (r *request) roomPage(edit, newType *form, sched *schedule, status int) error {
	id := r.Param("room")
	var d roomData
	if err := r.api.do(http.MethodGet, roomPath(id), nil, &d.Room); err != nil {
		return err
	}
	id = d.Room.ID
	types, err := list[rooms.EventTypeResponse](r, roomPath(id, "event-types"), url.Values{"limit": {"100"}})
	if err != nil {
		return err
	}
	d.EventTypes = types.Items
	d.MayManage = r.api.may(http.MethodPatch, roomPath(id))
	d.MayPublish = r.api.may(http.MethodPost, roomPath(id, "messages"))
	d.MayLog = r.api.may(http.MethodGet, roomPath(id, "messages"))
	d.MaySubs = r.api.may(http.MethodGet, roomPath(id, "subscriptions"))
	if d.MaySubs {
		q := r.listQuery(pageSize)
		if d.Status = r.QueryParam("status"); d.Status != "" {
			q.Set("status", d.Status)
		}
		d.Statuses = []option{{Value: "", Label: "any"}}
		for _, s := range []subscriptions.Status{subscriptions.StatusPending, subscriptions.StatusActive, subscriptions.StatusPaused,
			subscriptions.StatusRejected, subscriptions.StatusTerminated} {
			d.Statuses = append(d.Statuses, option{Value: string(s), Label: string(s)})
		}
		subs, err := list[subscriptions.Response](r, roomPath(id, "subscriptions"), q)
		if err != nil {
			return err
		}
		d.Subs, d.SubsNext = subs.Items, r.nextPage(subs.NextCursor)
	}
	d.Edit, d.NewType, d.Schedule = edit, newType, sched
	if d.Edit == nil {
		d.Edit = newForm(roomValues(d.Room))
	}
	if d.NewType == nil {
		d.NewType = newForm(nil)
	}
	d.SchedulePreview = sched != nil
	if d.Schedule == nil {
		// The room's own schedule, through the preview endpoint: no route
		// answers a room's schedule, and the preview computes it from the
		// same settings.
		var s retry.ScheduleResponse
		if err := r.api.do(http.MethodPost, "/v1/retry-schedule:preview", deliveryBody(d.Edit, omit), &s); err == nil {
			d.Schedule = newSchedule(s)
		}
	}
	return r.render(status, "room", d.Room.Identifier, "rooms", d)
}

// roomValues fills the settings form with the room's values.
func roomValues(room rooms.RoomResponse) url.Values {
	v := url.Values{}
	set := func(k, s string) {
		if s != "" {
			v.Set(k, s)
		}
	}
	set("managerIdentifier", room.ManagerIdentifier)
	set("messageExpiration", optInt64(room.MessageExpiration))
	set("deliveryDelay", strconv.FormatInt(room.DeliveryDelay, 10))
	set("deliveryDelayMultiplier", strconv.FormatFloat(room.DeliveryDelayMultiplier, 'g', -1, 64))
	set("deliveryAttempts", strconv.Itoa(room.DeliveryAttempts))
	set("maxDeliveryDelay", optInt64(room.MaxDeliveryDelay))
	set("deliveryJitter", strconv.FormatFloat(room.DeliveryJitter, 'g', -1, 64))
	set("subscriptionApproval", string(room.SubscriptionApproval))
	cb := room.CircuitBreaker
	if cb.Enabled {
		v.Set("circuitBreaker.enabled", "on")
	}
	set("circuitBreaker.failureRate", strconv.FormatFloat(cb.FailureRate, 'g', -1, 64))
	set("circuitBreaker.window", strconv.Itoa(cb.Window))
	set("circuitBreaker.minimumAttempts", strconv.Itoa(cb.MinimumAttempts))
	set("circuitBreaker.cooldown", strconv.FormatInt(cb.Cooldown, 10))
	set("circuitBreaker.maxCooldown", strconv.FormatInt(cb.MaxCooldown, 10))
	if p := room.RetryPolicy; p != nil {
		v.Set("usePolicy", "on")
		ints := map[string]*int{"retriesWithNoDelay": p.RetriesWithNoDelay, "minimumDelayRetries": p.MinimumDelayRetries,
			"backoffRetries": p.BackoffRetries, "maximumDelayRetries": p.MaximumDelayRetries}
		for k, n := range ints {
			if n != nil {
				v.Set("retryPolicy."+k, strconv.Itoa(*n))
			}
		}
		for k, n := range map[string]*int64{"minimumDelay": p.MinimumDelay, "maximumDelay": p.MaximumDelay} {
			if n != nil {
				v.Set("retryPolicy."+k, strconv.FormatInt(*n, 10))
			}
		}
		if p.RetryBackoffFunction != nil {
			v.Set("retryPolicy.retryBackoffFunction", *p.RetryBackoffFunction)
		}
		if p.Jitter != nil {
			v.Set("retryPolicy.jitter", strconv.FormatFloat(*p.Jitter, 'g', -1, 64))
		}
		if p.IgnoreSubscriptionOverride != nil && *p.IgnoreSubscriptionOverride {
			v.Set("retryPolicy.ignoreSubscriptionOverride", "on")
		}
	}
	return v
}

// policyFields are the four-phase policy's numeric fields.
var policyFields = []string{
	"retryPolicy.retriesWithNoDelay", "retryPolicy.minimumDelayRetries", "retryPolicy.minimumDelay",
	"retryPolicy.backoffRetries", "retryPolicy.maximumDelay", "retryPolicy.maximumDelayRetries", "retryPolicy.jitter",
}

// deliveryBody is the delivery settings of f as the API takes them on a
// room (and on the retry preview).
func deliveryBody(f *form, ifBlank blank) body {
	b := body{}
	b.numbers(f, omit, "deliveryDelay", "deliveryDelayMultiplier", "deliveryAttempts", "deliveryJitter")
	b.numbers(f, ifBlank, "maxDeliveryDelay")
	switch {
	case f.Checked("usePolicy"):
		b.set("retryPolicy", body{})
		b.numbers(f, omit, policyFields...)
		b.texts(f, omit, "retryPolicy.retryBackoffFunction")
		if f.Checked("retryPolicy.ignoreSubscriptionOverride") {
			b.set("retryPolicy.ignoreSubscriptionOverride", true)
		}
	case ifBlank == asNull:
		b.set("retryPolicy", nil)
	}
	return b
}

func (cn *Console) updateRoom(r *request) error {
	f := newForm(r.formValues())
	b := deliveryBody(f, asNull)
	b.texts(f, omit, "managerIdentifier", "subscriptionApproval")
	b.numbers(f, asNull, "messageExpiration")
	// Only a form that showed the breaker's fields changes it: an unticked
	// box sends nothing, which must not read as "off" from another form.
	if f.Checked("circuitBreakerShown") {
		b.set("circuitBreaker.enabled", f.Checked("circuitBreaker.enabled"))
		b.numbers(f, omit, circuitFields...)
	}
	if err := r.api.do(http.MethodPatch, roomPath(r.Param("room")), b, nil); err != nil {
		if p := refusal(err); p != nil {
			return r.roomPage(f.refused(p), nil, nil, p.Status)
		}
		return err
	}
	return r.Redirect(http.StatusSeeOther, "/console/rooms/"+url.PathEscape(r.Param("room"))+"?done=room-updated")
}

// previewRoom draws the schedule the settings form would give, unsaved.
func (cn *Console) previewRoom(r *request) error {
	f := newForm(r.formValues())
	var s retry.ScheduleResponse
	if err := r.api.do(http.MethodPost, "/v1/retry-schedule:preview", deliveryBody(f, omit), &s); err != nil {
		if p := refusal(err); p != nil {
			return r.roomPage(f.refused(p), nil, nil, p.Status)
		}
		return err
	}
	return r.roomPage(f, nil, newSchedule(s), http.StatusOK)
}

func (cn *Console) terminateRoom(r *request) error {
	if err := r.api.do(http.MethodPatch, roomPath(r.Param("room")), body{"status": "TERMINATED"}, nil); err != nil {
		if p := refusal(err); p != nil {
			return r.roomPage(newForm(nil).refused(p), nil, nil, p.Status)
		}
		return err
	}
	return r.Redirect(http.StatusSeeOther, "/console/rooms/"+url.PathEscape(r.Param("room"))+"?done=room-terminated")
}

func (cn *Console) createEventType(r *request) error {
	f := newForm(r.formValues())
	b := body{}
	b.texts(f, omit, "identifier", "description")
	var et rooms.EventTypeResponse
	if err := r.api.do(http.MethodPost, roomPath(r.Param("room"), "event-types"), b, &et); err != nil {
		if p := refusal(err); p != nil {
			return r.roomPage(nil, f.refused(p), nil, p.Status)
		}
		return err
	}
	return r.Redirect(http.StatusSeeOther, "/console/rooms/"+url.PathEscape(et.RoomID)+"/event-types/"+url.PathEscape(et.Identifier)+"?done=event-type-created")
}

type eventTypeData struct {
	Room      rooms.RoomResponse
	EventType rooms.EventTypeResponse
	Versions  []rooms.VersionResponse
	MayManage bool
	Form      *form
}

func (cn *Console) eventType(r *request) error {
	return r.eventTypePage(newForm(nil), http.StatusOK)
}

func (r *request) eventTypePage(f *form, status int) error {
	var d eventTypeData
	room, et := r.Param("room"), r.Param("eventType")
	if err := r.api.do(http.MethodGet, roomPath(room), nil, &d.Room); err != nil {
		return err
	}
	if err := r.api.do(http.MethodGet, roomPath(room, "event-types", et), nil, &d.EventType); err != nil {
		return err
	}
	vs, err := list[rooms.VersionResponse](r, roomPath(room, "event-types", et, "versions"), url.Values{})
	if err != nil {
		return err
	}
	// Newest first: the one a publish uses unless it names another.
	for i := len(vs.Items) - 1; i >= 0; i-- {
		d.Versions = append(d.Versions, vs.Items[i])
	}
	d.MayManage = r.api.may(http.MethodPost, roomPath(room, "event-types", et, "versions"))
	d.Form = f
	return r.render(status, "eventtype", d.EventType.Identifier, "rooms", d)
}

func (cn *Console) createVersion(r *request) error {
	f := newForm(r.formValues())
	b := body{}
	b.numbers(f, omit, "version")
	if s := f.Get("schema"); strings.TrimSpace(s) != "" {
		b.set("schema", jsonValue(s))
	}
	route := roomPath(r.Param("room"), "event-types", r.Param("eventType"), "versions")
	if err := r.api.do(http.MethodPost, route, b, nil); err != nil {
		if p := refusal(err); p != nil {
			return r.eventTypePage(f.refused(p), p.Status)
		}
		return err
	}
	return r.Redirect(http.StatusSeeOther, r.Request().URL.Path[:strings.LastIndex(r.Request().URL.Path, "/")]+"?done=version-created")
}

type publishData struct {
	Room       rooms.RoomResponse
	EventTypes []option
	Form       *form
	Result     *publish.PublishResponse
	MayLog     bool
}

func (cn *Console) publishForm(r *request) error {
	return r.publishPage(newForm(url.Values{"payload": {"{}"}}), nil, http.StatusOK)
}

func (r *request) publishPage(f *form, res *publish.PublishResponse, status int) error {
	var d publishData
	if err := r.api.do(http.MethodGet, roomPath(r.Param("room")), nil, &d.Room); err != nil {
		return err
	}
	types, err := list[rooms.EventTypeResponse](r, roomPath(d.Room.ID, "event-types"), url.Values{"limit": {"100"}})
	if err != nil {
		return err
	}
	for _, et := range types.Items {
		d.EventTypes = append(d.EventTypes, option{Value: et.Identifier, Label: et.Identifier})
	}
	d.Form, d.Result = f, res
	d.MayLog = r.api.may(http.MethodGet, roomPath(d.Room.ID, "messages"))
	return r.render(status, "publish", "Publish to "+d.Room.Identifier, "rooms", d)
}

func (cn *Console) publish(r *request) error {
	f := newForm(r.formValues())
	b := body{}
	b.texts(f, omit, "eventType", "correlationId")
	b.numbers(f, omit, "eventTypeVersion")
	b.set("payload", jsonValue(f.Get("payload")))
	if s := strings.TrimSpace(f.Get("attributes")); s != "" {
		b.set("attributes", jsonValue(s))
	}
	var res publish.PublishResponse
	if err := r.api.do(http.MethodPost, roomPath(r.Param("room"), "messages"), b, &res); err != nil {
		if p := refusal(err); p != nil {
			return r.publishPage(f.refused(p), nil, p.Status)
		}
		return err
	}
	return r.publishPage(f, &res, http.StatusAccepted)
}
