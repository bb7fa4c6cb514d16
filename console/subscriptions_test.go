package console_test

import (
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/roomhub/messaging-api/api"
	"github.com/roomhub/messaging-api/app/apptest"
	"github.com/roomhub/messaging-api/auth"
	"github.com/roomhub/messaging-api/store"
)

// Credentials the forms send: no page may ever show them.
const (
	secretHeader   = "hdr-secret-value-7f3a"
	secretPassword = "pw-secret-value-91c2"
	secretToken    = "tok-secret-value-44d8"
)

// secretKeeper fails the test when any page read holds a secret, or
// anything the Content-Security-Policy forbids.
type secretKeeper struct {
	t *testing.T
	b *browser
}

func (s secretKeeper) check(what string, p page) page {
	s.t.Helper()
	checkStrict(s.t, what, p)
	for _, secret := range []string{secretHeader, secretPassword, secretToken} {
		if strings.Contains(p.Body, secret) {
			s.t.Errorf("%s: the page shows the secret %q", what, secret)
		}
	}
	return p
}

func (s secretKeeper) get(path string) page {
	s.t.Helper()
	return s.check("GET "+path, s.b.get(path))
}

func (s secretKeeper) post(path string, form url.Values) page {
	s.t.Helper()
	return s.check("POST "+path, s.b.post(path, form))
}

// errorBeside is the text of the errors beside the field name ("" without).
func errorBeside(p page, name string) string {
	m := regexp.MustCompile(`id="e-` + regexp.QuoteMeta(name) + `">(.*?)</ul>`).FindStringSubmatch(p.Body)
	if m == nil {
		return ""
	}
	return m[1]
}

// TestSubscriptionFeatures: approval, attribute filters, pushAuth, test
// events, the circuit breaker and the rate limit, each through the console
// as the API takes them; the credential's secrets appear in no page.
func TestSubscriptionFeatures(t *testing.T) {
	t.Parallel()
	h := newHarness(t, store.SQLite, true)
	apptest.Want(t, h.as(h.Admin, "POST", "/v1/rooms", map[string]any{"identifier": "orders", "managerIdentifier": "team-a"}), http.StatusCreated)
	apptest.Want(t, h.as(h.Admin, "POST", "/v1/rooms/orders/event-types", map[string]any{"identifier": "order.created"}), http.StatusCreated)
	_, mgrToken, err := h.keysCreate(auth.Spec{Name: "mgr", Role: api.RoleManager, Subject: "team-a"})
	if err != nil {
		t.Fatal(err)
	}
	_, subToken, err := h.keysCreate(auth.Spec{Name: "sub", Role: api.RoleSubscriber, Subject: "team-s", Rooms: []auth.GrantSpec{{Room: "orders"}}})
	if err != nil {
		t.Fatal(err)
	}
	hook := apptest.NewHook(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("<b>ok</b>"))
	})

	mgr := secretKeeper{t: t, b: h.browser()}
	mgr.b.signIn(mgrToken)
	subr := secretKeeper{t: t, b: h.browser()}
	subr.b.signIn(subToken)

	// The room's settings: manual approval and the circuit breaker.
	room := mgr.get("/console/rooms/orders")
	want(t, room, http.StatusOK)
	for _, id := range []string{"f-subscriptionApproval", "f-circuitBreaker-enabled", "f-circuitBreaker-failureRate", "f-circuitBreaker-maxCooldown"} {
		if !strings.Contains(room.Body, `id="`+id+`"`) {
			t.Errorf("the room form lacks %s", id)
		}
	}
	want(t, mgr.post("/console/rooms/orders", url.Values{
		"subscriptionApproval": {"MANUAL"}, "circuitBreakerShown": {"on"}, "circuitBreaker.failureRate": {"0.5"},
		"circuitBreaker.window": {"20"}, "circuitBreaker.minimumAttempts": {"10"}, "circuitBreaker.cooldown": {"5000"},
		"circuitBreaker.maxCooldown": {"60000"},
	}), http.StatusSeeOther)
	got := h.as(h.Admin, "GET", "/v1/rooms/orders", nil).JSON(t)
	cb := got["circuitBreaker"].(map[string]any)
	if got["subscriptionApproval"] != "MANUAL" || cb["enabled"] != false || cb["failureRate"] != 0.5 || cb["window"] != 20.0 ||
		cb["minimumAttempts"] != 10.0 || cb["cooldown"] != 5000.0 || cb["maxCooldown"] != 60000.0 {
		t.Errorf("the room after the form: %v", got)
	}
	// A form without the breaker's fields leaves it as it is.
	want(t, mgr.post("/console/rooms/orders", url.Values{"deliveryAttempts": {"4"}}), http.StatusSeeOther)
	if cb := h.as(h.Admin, "GET", "/v1/rooms/orders", nil).JSON(t)["circuitBreaker"].(map[string]any); cb["window"] != 20.0 {
		t.Errorf("a form without the breaker changed it: %v", cb)
	}

	newSub := url.Values{
		"type": {"PUSH"}, "pushUrl": {hook.URL()}, "eventTypes[0].eventType": {"order.created"},
		"attributeFilter": {`{"region": ["eu"], "priority": [{"numeric": [">=", "high"]}]}`},
		"pushAuth.type":   {"headers"}, "pushAuth.headers[0].name": {"X-Api-Key"}, "pushAuth.headers[0].value": {secretHeader},
		"pushAuth.headers[1].name": {"Host"}, "pushAuth.headers[1].value": {"x"},
		"maxDeliveryRate": {"5"}, "circuitBreaker.enabled": {"true"}, "circuitBreaker.window": {"30"},
	}
	p := subr.get("/console/rooms/orders/subscriptions/new")
	for _, id := range []string{"f-attributeFilter", "auth-basic", "f-pushAuth-password", "f-pushAuth-headers-3-value", "f-maxDeliveryRate", "f-circuitBreaker-cooldown"} {
		if !strings.Contains(p.Body, `id="`+id+`"`) {
			t.Errorf("the new subscription form lacks %s", id)
		}
	}
	if !strings.Contains(p.Body, "approves its subscriptions by hand") {
		t.Error("the form does not say the room approves by hand")
	}
	// Refused: the filter's error beside it with its pointer, the header's
	// beside the headers; the secret typed is not sent back.
	p = subr.post("/console/rooms/orders/subscriptions", newSub)
	want(t, p, http.StatusUnprocessableEntity)
	if e := errorBeside(p, "attributeFilter"); !strings.Contains(e, "/attributeFilter/priority/0/numeric/1") {
		t.Errorf("the filter's error beside it: %q", e)
	}
	if !strings.Contains(p.Body, "/pushAuth/headers/Host") {
		t.Errorf("the header's error is not shown: %s", p.Body)
	}
	if !strings.Contains(p.Body, `value="X-Api-Key"`) || !strings.Contains(p.Body, `id="auth-headers" name="pushAuth.type" value="headers" checked`) {
		t.Error("the refused form lost what was typed")
	}
	// A basic credential with a bad username: the password is not shown back.
	basic := url.Values{"type": {"PUSH"}, "pushUrl": {hook.URL()}, "eventTypes[0].eventType": {"order.created"},
		"pushAuth.type": {"basic"}, "pushAuth.username": {"a:b"}, "pushAuth.password": {secretPassword}}
	p = subr.post("/console/rooms/orders/subscriptions", basic)
	want(t, p, http.StatusUnprocessableEntity)
	if e := errorBeside(p, "pushAuth-username"); !strings.Contains(e, "must not contain") {
		t.Errorf("the username's error beside it: %q", e)
	}

	newSub.Set("attributeFilter", `{"region": ["eu"], "priority": [{"numeric": [">=", 5]}]}`)
	newSub.Del("pushAuth.headers[1].name")
	newSub.Del("pushAuth.headers[1].value")
	p = subr.post("/console/rooms/orders/subscriptions", newSub)
	want(t, p, http.StatusCreated)
	id := regexp.MustCompile(`id="subscription-id">([^<]+)<`).FindStringSubmatch(p.Body)[1]
	apiPath := "/v1/rooms/orders/subscriptions/" + id
	s := h.as(h.Admin, "GET", apiPath, nil).JSON(t)
	if s["status"] != "PENDING" || s["maxDeliveryRate"] != 5.0 ||
		s["circuitBreaker"].(map[string]any)["window"] != 30.0 || s["circuitBreaker"].(map[string]any)["enabled"] != true ||
		s["attributeFilter"].(map[string]any)["region"] == nil || s["pushAuth"].(map[string]any)["type"] != "headers" {
		t.Errorf("the subscription the form made: %v", s)
	}
	page := "/console/rooms/orders/subscriptions/" + id
	p = subr.get(page)
	for _, shown := range []string{"PENDING", `id="attribute-filter"`, "<code>X-Api-Key</code>", "configured", "5 requests per second", `id="circuit-state"`} {
		if !strings.Contains(p.Body, shown) {
			t.Errorf("the subscription's page lacks %s", shown)
		}
	}
	if strings.Contains(p.Body, `/approve"`) || strings.Contains(p.Body, `/reject"`) {
		t.Error("the subscriber is offered the decision, which is the manager's")
	}

	// The status filter finds it; the manager decides.
	if p := mgr.get("/console/rooms/orders?status=PENDING"); !strings.Contains(p.Body, id) {
		t.Error("the PENDING filter does not list the pending subscription")
	}
	if p := mgr.get("/console/rooms/orders?status=ACTIVE"); strings.Contains(p.Body, id) {
		t.Error("the ACTIVE filter lists the pending subscription")
	}
	p = mgr.get(page)
	if !strings.Contains(p.Body, `/approve"`) || !strings.Contains(p.Body, `/reject"`) || !strings.Contains(p.Body, `name="reason"`) {
		t.Fatal("the manager is not offered the decision")
	}
	p = mgr.post(page+"/reject", url.Values{"reason": {"  "}})
	want(t, p, http.StatusUnprocessableEntity)
	if e := errorBeside(p, "reason"); !strings.Contains(e, "is required") {
		t.Errorf("the reason's error beside it: %q", e)
	}
	want(t, mgr.post(page+"/approve", nil), http.StatusSeeOther)
	p = mgr.get(page + "?done=approved")
	if !strings.Contains(p.Body, "team-a") || !strings.Contains(p.Body, `id="decision"`) || strings.Contains(p.Body, `/approve"`) {
		t.Errorf("the approved subscription's page: %s", p.Body)
	}

	// A test event: the endpoint's answer, escaped; the credential sent.
	p = subr.post(page+"/test", nil)
	want(t, p, http.StatusOK)
	if !strings.Contains(p.Body, `id="test-status">200<`) || !strings.Contains(p.Body, "&lt;b&gt;ok&lt;/b&gt;") || strings.Contains(p.Body, "<b>ok</b>") {
		t.Errorf("the test's outcome: %s", p.Body)
	}
	if r := hook.Requests(); len(r) != 1 || r[0].Header.Get("X-Api-Key") != secretHeader {
		t.Fatalf("the test event: %v", r)
	}

	// The settings form: nothing secret in it; saving with the secret
	// fields empty keeps the credential, and clears emptied overrides.
	p = subr.get(page + "/edit")
	want(t, p, http.StatusOK)
	if !strings.Contains(p.Body, `value="X-Api-Key"`) || !strings.Contains(p.Body, `id="f-pushAuth-remove"`) || !strings.Contains(p.Body, "&#34;region&#34;") {
		t.Errorf("the settings form: %s", p.Body)
	}
	edit := url.Values{"pushUrl": {hook.URL()}, "eventTypes[0].eventType": {"order.created"}, "pushAuth.type": {"headers"},
		"pushAuth.headers[0].name": {"X-Api-Key"}, "maxDeliveryRate": {"7"}}
	want(t, subr.post(page, edit), http.StatusSeeOther)
	s = h.as(h.Admin, "GET", apiPath, nil).JSON(t)
	if s["pushAuth"] == nil || s["maxDeliveryRate"] != 7.0 || s["circuitBreaker"] != nil || s["attributeFilter"] != nil {
		t.Errorf("after saving with no secret typed: %v", s)
	}
	edit.Set("pushAuth.type", "bearer")
	edit.Set("pushAuth.token", secretToken)
	want(t, subr.post(page, edit), http.StatusSeeOther)
	if a := h.as(h.Admin, "GET", apiPath, nil).JSON(t)["pushAuth"].(map[string]any); a["type"] != "bearer" {
		t.Errorf("a new credential: %v", a)
	}
	subr.get(page + "/edit")
	edit.Set("pushAuth.remove", "on")
	want(t, subr.post(page, edit), http.StatusSeeOther)
	if a := h.as(h.Admin, "GET", apiPath, nil).JSON(t)["pushAuth"]; a != nil {
		t.Errorf("removed, the credential is %v", a)
	}

	// The circuit: shown, and reset by whoever may.
	p = subr.get(page)
	if !strings.Contains(p.Body, `id="reset-circuit"`) || !strings.Contains(p.Body, "st-closed") {
		t.Errorf("the circuit section: %s", p.Body)
	}
	p = subr.post(page+"/circuit-reset", nil)
	want(t, p, http.StatusSeeOther)
	if !strings.Contains(subr.get(p.Location).Body, "The circuit was closed") {
		t.Error("the reset does not say so")
	}

	// Another, rejected with a reason the page shows.
	pull := url.Values{"type": {"PULL"}, "eventTypes[0].eventType": {"order.created"}}
	p = subr.post("/console/rooms/orders/subscriptions", pull)
	want(t, p, http.StatusCreated)
	other := "/console/rooms/orders/subscriptions/" + regexp.MustCompile(`id="subscription-id">([^<]+)<`).FindStringSubmatch(p.Body)[1]
	mgr.get(other)
	want(t, mgr.post(other+"/reject", url.Values{"reason": {"Only <billing> receives orders."}}), http.StatusSeeOther)
	p = mgr.get(other)
	if !strings.Contains(p.Body, "Only &lt;billing&gt; receives orders.") || !strings.Contains(p.Body, "REJECTED") ||
		!strings.Contains(p.Body, "none: every event") ||
		strings.Contains(p.Body, `/edit"`) || strings.Contains(p.Body, `id="send-test"`) {
		t.Errorf("the rejected subscription's page: %s", p.Body)
	}
	if p := mgr.get("/console/rooms/orders?status=REJECTED"); !strings.Contains(p.Body, "st-REJECTED") {
		t.Error("the REJECTED filter lists nothing")
	}
}
