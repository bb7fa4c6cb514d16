package console

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/roomhub/messaging-api/delivery"
	"github.com/roomhub/messaging-api/retry"
	"github.com/roomhub/messaging-api/rooms"
	"github.com/roomhub/messaging-api/subscriptions"
)

// filterRows is how many event type filters the new subscription form offers.
const filterRows = 3

type newSubscriptionData struct {
	Room       rooms.RoomResponse
	EventTypes []option
	Form       *form
	Filters    []int
}

func (cn *Console) newSubscription(r *request) error {
	return r.newSubscriptionPage(newForm(url.Values{"type": {"PUSH"}}), http.StatusOK)
}

func (r *request) newSubscriptionPage(f *form, status int) error {
	d := newSubscriptionData{Form: f}
	if err := r.api.do(http.MethodGet, roomPath(r.Param("room")), nil, &d.Room); err != nil {
		return err
	}
	types, err := list[rooms.EventTypeResponse](r, roomPath(d.Room.ID, "event-types"), url.Values{"limit": {"100"}})
	if err != nil {
		return err
	}
	d.EventTypes = []option{{Value: "", Label: "(none)"}}
	for _, et := range types.Items {
		d.EventTypes = append(d.EventTypes, option{Value: et.Identifier, Label: et.Identifier})
	}
	for i := range filterRows {
		d.Filters = append(d.Filters, i)
	}
	return r.render(status, "subscription_new", "New subscription", "rooms", d)
}

func (cn *Console) createSubscription(r *request) error {
	f := newForm(r.formValues())
	b := body{}
	b.texts(f, omit, "type", "owner")
	if f.Get("type") != string(subscriptions.TypePull) {
		b.texts(f, omit, "pushUrl")
	} else {
		b.numbers(f, omit, "ackDeadline")
	}
	b.numbers(f, omit, "deliveryDelay", "deliveryDelayMultiplier", "deliveryAttempts")
	filters := []body{}
	for i := range filterRows {
		name := fmt.Sprintf("eventTypes[%d]", i)
		et := strings.TrimSpace(f.Get(name + ".eventType"))
		vs := splitList(f.Get(name + ".versions"))
		if et == "" && len(vs) == 0 {
			continue
		}
		fb := body{"eventType": et}
		if len(vs) > 0 {
			versions := make([]any, len(vs))
			for j, v := range vs {
				versions[j] = number(v)
			}
			fb["versions"] = versions
		}
		filters = append(filters, fb)
	}
	b["eventTypes"] = filters
	var s subscriptions.Response
	if err := r.api.do(http.MethodPost, roomPath(r.Param("room"), "subscriptions"), b, &s); err != nil {
		if p := refusal(err); p != nil {
			return r.newSubscriptionPage(f.refused(p), p.Status)
		}
		return err
	}
	r.SetParamNames("room", "sub")
	r.SetParamValues(s.RoomID, s.ID)
	return r.subscriptionPage(s.SigningSecret, nil, http.StatusCreated)
}

type subscriptionData struct {
	Room       rooms.RoomResponse
	Sub        subscriptions.Response
	Schedule   *schedule
	Deliveries []delivery.DeliveryResponse
	Next       string
	// Secret is the signing secret, shown once: after creation or rotation.
	Secret         string
	MayChange      bool
	MayRotate      bool
	MayDeadLetters bool
	Problem        *apiError
}

func (cn *Console) subscription(r *request) error {
	return r.subscriptionPage("", nil, http.StatusOK)
}

// subPath is the API path of the page's subscription, and more below it.
func (r *request) subPath(more ...string) string {
	return roomPath(r.Param("room"), append([]string{"subscriptions", r.Param("sub")}, more...)...)
}

func (r *request) subscriptionPage(secret string, problem *apiError, status int) error {
	d := subscriptionData{Secret: secret, Problem: problem}
	if err := r.api.do(http.MethodGet, roomPath(r.Param("room")), nil, &d.Room); err != nil {
		return err
	}
	if err := r.api.do(http.MethodGet, r.subPath(), nil, &d.Sub); err != nil {
		return err
	}
	var s retry.ScheduleResponse
	if err := r.api.do(http.MethodGet, r.subPath("retry-schedule"), nil, &s); err == nil {
		d.Schedule = newSchedule(s)
	}
	ds, err := list[delivery.DeliveryResponse](r, r.subPath("deliveries"), r.listQuery(20))
	if err != nil {
		return err
	}
	d.Deliveries, d.Next = ds.Items, r.nextPage(ds.NextCursor)
	d.MayChange = r.api.may(http.MethodPatch, r.subPath())
	d.MayRotate = d.Sub.Type == subscriptions.TypePush && r.api.may(http.MethodPost, r.subPath("secret:rotate"))
	d.MayDeadLetters = r.api.may(http.MethodGet, r.subPath("dead-letters"))
	return r.render(status, "subscription", "Subscription "+short(d.Sub.ID), "rooms", d)
}

// statusDone names the flash message of each status a subscription is set to.
var statusDone = map[string]string{"ACTIVE": "resumed", "PAUSED": "paused", "TERMINATED": "terminated"}

func (cn *Console) setSubscriptionStatus(r *request) error {
	status := r.FormValue("status")
	if err := r.api.do(http.MethodPatch, r.subPath(), body{"status": status}, nil); err != nil {
		if p := refusal(err); p != nil {
			return r.subscriptionPage("", p, p.Status)
		}
		return err
	}
	return r.Redirect(http.StatusSeeOther, r.Request().URL.Path[:strings.LastIndex(r.Request().URL.Path, "/")]+"?done="+statusDone[status])
}

func (cn *Console) rotateSecret(r *request) error {
	var s subscriptions.Response
	if err := r.api.do(http.MethodPost, r.subPath("secret:rotate"), nil, &s); err != nil {
		if p := refusal(err); p != nil {
			return r.subscriptionPage("", p, p.Status)
		}
		return err
	}
	return r.subscriptionPage(s.SigningSecret, nil, http.StatusOK)
}
