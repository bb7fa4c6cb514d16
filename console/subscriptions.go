package console

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/roomhub/messaging-api/delivery"
	"github.com/roomhub/messaging-api/retry"
	"github.com/roomhub/messaging-api/rooms"
	"github.com/roomhub/messaging-api/subscriptions"
)

const (
	// filterRows is how many event type filters a subscription form offers
	// at least (one more than the subscription has, when editing).
	filterRows = 3
	// headerRows is how many header rows a headers credential offers: a
	// fixed number, so the form needs no script.
	headerRows = 4
)

// circuitFields are the circuit breaker's numeric settings, on a room and
// as a subscription's overrides.
var circuitFields = []string{
	"circuitBreaker.failureRate", "circuitBreaker.window", "circuitBreaker.minimumAttempts",
	"circuitBreaker.cooldown", "circuitBreaker.maxCooldown",
}

// subscriptionFormData is the page of a subscription's form: a new one, or
// the settings of Sub.
type subscriptionFormData struct {
	Room       rooms.RoomResponse
	Sub        *subscriptions.Response // nil: a new subscription
	EventTypes []option
	Form       *form
	Filters    []int
	Headers    []int
}

// Action is where the form posts.
func (d subscriptionFormData) Action() string {
	if d.Sub == nil {
		return "/console/rooms/" + d.Room.ID + "/subscriptions"
	}
	return "/console/rooms/" + d.Room.ID + "/subscriptions/" + d.Sub.ID
}

func (cn *Console) newSubscription(r *request) error {
	return r.subscriptionFormPage(newForm(url.Values{"type": {"PUSH"}, "pushAuth.type": {"none"}}), nil, http.StatusOK)
}

// subscriptionFormPage renders the form f, of a new subscription when sub
// is nil, else of sub's settings.
func (r *request) subscriptionFormPage(f *form, sub *subscriptions.Response, status int) error {
	d := subscriptionFormData{Form: f, Sub: sub}
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
	rows := filterRows
	if sub != nil {
		rows = max(rows, len(sub.EventTypes)+1)
	}
	for i := range rows {
		d.Filters = append(d.Filters, i)
	}
	for i := range headerRows {
		d.Headers = append(d.Headers, i)
	}
	title := "New subscription"
	if sub != nil {
		title = "Settings of subscription " + short(sub.ID)
	}
	return r.render(status, "subscription_form", title, "rooms", d)
}

// subscriptionBody is the JSON body the form f makes: of a POST for a new
// subscription (was nil), else of a PATCH of was, where an emptied field
// clears its override.
func subscriptionBody(f *form, was *subscriptions.Response) body {
	edit := was != nil
	ifBlank := omit
	if edit {
		ifBlank = asNull
	}
	b := body{}
	push := f.Get("type") != string(subscriptions.TypePull)
	if !edit {
		b.texts(f, omit, "type", "owner")
	}
	if push {
		b.texts(f, omit, "pushUrl")
		if auth, send := pushAuthBody(f, was); send {
			b["pushAuth"] = auth
		}
	} else {
		b.numbers(f, omit, "ackDeadline")
	}
	b.numbers(f, ifBlank, "deliveryDelay", "deliveryDelayMultiplier", "deliveryAttempts")
	if push {
		b.numbers(f, ifBlank, "maxDeliveryRate")
		switch f.Get("circuitBreaker.enabled") {
		case "true":
			b.set("circuitBreaker.enabled", true)
		case "false":
			b.set("circuitBreaker.enabled", false)
		}
		b.numbers(f, omit, circuitFields...)
		if _, ok := b["circuitBreaker"]; !ok && edit {
			b["circuitBreaker"] = nil // no override left: the room's settings
		}
	}
	filters := []body{}
	for i := 0; ; i++ {
		name := fmt.Sprintf("eventTypes[%d]", i)
		if _, ok := f.Values[name+".eventType"]; !ok && i >= filterRows {
			break // an edit offers a row more than the subscription has
		}
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
	switch s := strings.TrimSpace(f.Get("attributeFilter")); {
	case s != "":
		b["attributeFilter"] = jsonValue(s)
	case edit:
		b["attributeFilter"] = nil
	}
	return b
}

// pushAuthBody is the pushAuth member the form f makes, and whether to send
// it at all. The secrets are write-only: a form never shows them, so on an
// edit (was not nil) of a subscription that has a credential, leaving them
// empty keeps it, and only the remove box takes it away.
func pushAuthBody(f *form, was *subscriptions.Response) (any, bool) {
	if was != nil && f.Checked("pushAuth.remove") {
		return nil, true
	}
	typ := f.Get("pushAuth.type")
	if typ == "" || typ == "none" {
		return nil, false
	}
	a := body{"type": typ}
	secret := false
	switch subscriptions.AuthType(typ) {
	case subscriptions.AuthBasic:
		a["username"] = strings.TrimSpace(f.Get("pushAuth.username"))
		if pw := f.Get("pushAuth.password"); pw != "" {
			a["password"], secret = pw, true
		}
	case subscriptions.AuthBearer:
		if tok := strings.TrimSpace(f.Get("pushAuth.token")); tok != "" {
			a["token"], secret = tok, true
		}
	case subscriptions.AuthHeaders:
		headers := map[string]string{}
		for i := range headerRows {
			name := strings.TrimSpace(f.Get(fmt.Sprintf("pushAuth.headers[%d].name", i)))
			value := f.Get(fmt.Sprintf("pushAuth.headers[%d].value", i))
			if name == "" && value == "" {
				continue
			}
			headers[name] = value
			secret = secret || value != ""
		}
		a["headers"] = headers
	}
	if was != nil && was.PushAuth != nil && !secret {
		return nil, false
	}
	return a, true
}

func (cn *Console) createSubscription(r *request) error {
	f := newForm(r.formValues())
	var s subscriptions.Response
	if err := r.api.do(http.MethodPost, roomPath(r.Param("room"), "subscriptions"), subscriptionBody(f, nil), &s); err != nil {
		if p := refusal(err); p != nil {
			return r.subscriptionFormPage(f.refused(p), nil, p.Status)
		}
		return err
	}
	r.SetParamNames("room", "sub")
	r.SetParamValues(s.RoomID, s.ID)
	return r.subscriptionPage(subExtras{Secret: s.SigningSecret}, http.StatusCreated)
}

func (cn *Console) editSubscription(r *request) error {
	var s subscriptions.Response
	if err := r.api.do(http.MethodGet, r.subPath(), nil, &s); err != nil {
		return err
	}
	return r.subscriptionFormPage(newForm(subscriptionValues(s)), &s, http.StatusOK)
}

func (cn *Console) updateSubscription(r *request) error {
	var was subscriptions.Response
	if err := r.api.do(http.MethodGet, r.subPath(), nil, &was); err != nil {
		return err
	}
	f := newForm(r.formValues())
	f.Values.Set("type", string(was.Type)) // not a field: a subscription keeps its type
	if err := r.api.do(http.MethodPatch, r.subPath(), subscriptionBody(f, &was), nil); err != nil {
		if p := refusal(err); p != nil {
			return r.subscriptionFormPage(f.refused(p), &was, p.Status)
		}
		return err
	}
	return r.Redirect(http.StatusSeeOther, r.Request().URL.Path+"?done=subscription-updated")
}

// subscriptionValues fills the settings form with s's values: never a
// secret of its pushAuth, which the API does not show either.
func subscriptionValues(s subscriptions.Response) url.Values {
	v := url.Values{"type": {string(s.Type)}, "pushAuth.type": {"none"}}
	set := func(k, s string) {
		if s != "" {
			v.Set(k, s)
		}
	}
	float := func(p *float64) string {
		return optional(p, func(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) })
	}
	set("pushUrl", optional(s.PushURL, func(u string) string { return u }))
	if s.Type == subscriptions.TypePull {
		set("ackDeadline", strconv.FormatInt(s.AckDeadline, 10))
	}
	for i, et := range s.EventTypes {
		name := fmt.Sprintf("eventTypes[%d]", i)
		v.Set(name+".eventType", et.EventType)
		vs := make([]string, len(et.Versions))
		for j, n := range et.Versions {
			vs[j] = strconv.Itoa(n)
		}
		set(name+".versions", strings.Join(vs, ", "))
	}
	if len(s.AttributeFilter) > 0 && string(s.AttributeFilter) != "null" { // JSON null: no filter
		v.Set("attributeFilter", prettyJSON(s.AttributeFilter))
	}
	set("deliveryDelay", optInt64(s.DeliveryDelay))
	set("deliveryDelayMultiplier", float(s.DeliveryDelayMultiplier))
	set("deliveryAttempts", optional(s.DeliveryAttempts, strconv.Itoa))
	set("maxDeliveryRate", float(s.MaxDeliveryRate))
	if cb := s.CircuitBreaker; cb != nil {
		set("circuitBreaker.enabled", optional(cb.Enabled, strconv.FormatBool))
		set("circuitBreaker.failureRate", float(cb.FailureRate))
		set("circuitBreaker.window", optional(cb.Window, strconv.Itoa))
		set("circuitBreaker.minimumAttempts", optional(cb.MinimumAttempts, strconv.Itoa))
		set("circuitBreaker.cooldown", optInt64(cb.Cooldown))
		set("circuitBreaker.maxCooldown", optInt64(cb.MaxCooldown))
	}
	if a := s.PushAuth; a != nil {
		v.Set("pushAuth.type", string(a.Type))
		set("pushAuth.username", a.Username)
		for i, name := range a.HeaderNames {
			if i < headerRows {
				v.Set(fmt.Sprintf("pushAuth.headers[%d].name", i), name)
			}
		}
	}
	return v
}

// subExtras is what a subscription's page shows besides the subscription:
// the answer to the form just sent.
type subExtras struct {
	// Secret is the signing secret, shown once: after creation or rotation.
	Secret  string
	Problem *apiError
	// Reject is the rejection form sent back with the API's refusal.
	Reject *form
	// Test is the outcome of the test event just sent.
	Test *subscriptions.TestResponse
}

type subscriptionData struct {
	subExtras
	Room       rooms.RoomResponse
	Sub        subscriptions.Response
	Schedule   *schedule
	Deliveries []delivery.DeliveryResponse
	Next       string
	MayChange  bool
	MayRotate  bool
	// MayDecide: the key may approve or reject the PENDING subscription.
	MayDecide      bool
	MayTest        bool
	MayReset       bool
	MayDeadLetters bool
}

func (cn *Console) subscription(r *request) error {
	return r.subscriptionPage(subExtras{}, http.StatusOK)
}

// subPath is the API path of the page's subscription, and more below it.
func (r *request) subPath(more ...string) string {
	return roomPath(r.Param("room"), append([]string{"subscriptions", r.Param("sub")}, more...)...)
}

func (r *request) subscriptionPage(x subExtras, status int) error {
	d := subscriptionData{subExtras: x}
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
	push := d.Sub.Type == subscriptions.TypePush
	d.MayChange = r.api.may(http.MethodPatch, r.subPath())
	d.MayRotate = push && r.api.may(http.MethodPost, r.subPath("secret:rotate"))
	d.MayDecide = d.Sub.Status == subscriptions.StatusPending && r.api.may(http.MethodPost, r.subPath()+":approve")
	d.MayTest = push && d.Sub.Status != subscriptions.StatusTerminated && r.api.may(http.MethodPost, r.subPath()+":test")
	d.MayReset = push && r.api.may(http.MethodPost, r.subPath("circuit:reset"))
	d.MayDeadLetters = r.api.may(http.MethodGet, r.subPath("dead-letters"))
	if d.Reject == nil {
		d.Reject = newForm(nil)
	}
	return r.render(status, "subscription", "Subscription "+short(d.Sub.ID), "rooms", d)
}

// subPage is the console path of the page's subscription.
func (r *request) subPage() string {
	p := r.Request().URL.Path
	return p[:strings.LastIndex(p, "/")]
}

// statusDone names the flash message of each status a subscription is set to.
var statusDone = map[string]string{"ACTIVE": "resumed", "PAUSED": "paused", "TERMINATED": "terminated"}

func (cn *Console) setSubscriptionStatus(r *request) error {
	status := r.FormValue("status")
	if err := r.api.do(http.MethodPatch, r.subPath(), body{"status": status}, nil); err != nil {
		if p := refusal(err); p != nil {
			return r.subscriptionPage(subExtras{Problem: p}, p.Status)
		}
		return err
	}
	return r.Redirect(http.StatusSeeOther, r.subPage()+"?done="+statusDone[status])
}

func (cn *Console) rotateSecret(r *request) error {
	var s subscriptions.Response
	if err := r.api.do(http.MethodPost, r.subPath("secret:rotate"), nil, &s); err != nil {
		if p := refusal(err); p != nil {
			return r.subscriptionPage(subExtras{Problem: p}, p.Status)
		}
		return err
	}
	return r.subscriptionPage(subExtras{Secret: s.SigningSecret}, http.StatusOK)
}

func (cn *Console) approveSubscription(r *request) error {
	if err := r.api.do(http.MethodPost, r.subPath()+":approve", nil, nil); err != nil {
		if p := refusal(err); p != nil {
			return r.subscriptionPage(subExtras{Problem: p}, p.Status)
		}
		return err
	}
	return r.Redirect(http.StatusSeeOther, r.subPage()+"?done=approved")
}

func (cn *Console) rejectSubscription(r *request) error {
	f := newForm(r.formValues())
	// The reason as typed: the API alone says what a reason may be.
	if err := r.api.do(http.MethodPost, r.subPath()+":reject", body{"reason": f.Get("reason")}, nil); err != nil {
		if p := refusal(err); p != nil {
			return r.subscriptionPage(subExtras{Reject: f.refused(p)}, p.Status)
		}
		return err
	}
	return r.Redirect(http.StatusSeeOther, r.subPage()+"?done=rejected")
}

func (cn *Console) testSubscription(r *request) error {
	var res subscriptions.TestResponse
	if err := r.api.do(http.MethodPost, r.subPath()+":test", nil, &res); err != nil {
		if p := refusal(err); p != nil {
			return r.subscriptionPage(subExtras{Problem: p}, p.Status)
		}
		return err
	}
	return r.subscriptionPage(subExtras{Test: &res}, http.StatusOK)
}

func (cn *Console) resetCircuit(r *request) error {
	if err := r.api.do(http.MethodPost, r.subPath("circuit:reset"), nil, nil); err != nil {
		if p := refusal(err); p != nil {
			return r.subscriptionPage(subExtras{Problem: p}, p.Status)
		}
		return err
	}
	return r.Redirect(http.StatusSeeOther, r.subPage()+"?done=circuit-reset")
}
