package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/roomhub/messaging-api/api"
	"github.com/roomhub/messaging-api/app/apptest"
	"github.com/roomhub/messaging-api/delivery"
	"github.com/roomhub/messaging-api/message"
	"github.com/roomhub/messaging-api/store"
)

// storeDeadLetters stores a dead letter of subscription subID for each
// reason, in order, as the dispatcher would.
func storeDeadLetters(t *testing.T, h *harness, subID string, reasons ...string) []uuid.UUID {
	t.Helper()
	r := h.as(h.Admin, "GET", "/v1/rooms/orders", nil)
	apptest.Want(t, r, http.StatusOK)
	room := uuid.MustParse(r.JSON(t)["id"].(string))
	r = h.as(h.Admin, "GET", "/v1/rooms/orders/event-types/order.created", nil)
	apptest.Want(t, r, http.StatusOK)
	etID := uuid.MustParse(r.JSON(t)["id"].(string))
	ids := make([]uuid.UUID, len(reasons))
	for i, reason := range reasons {
		now := time.Now().UTC().Truncate(time.Microsecond)
		dl := delivery.DeadLetter{
			ID: uuid.Must(uuid.NewV7()), RoomID: room, SubscriptionID: uuid.MustParse(subID),
			Event: message.Event{
				ID: uuid.Must(uuid.NewV7()), RoomID: room, CorrelationID: fmt.Sprintf("corr-%d", i),
				EventTypeID: etID, EventType: "order.created", Version: 1,
				Payload: json.RawMessage(fmt.Sprintf(`{"orderId":"o-%d"}`, i)), PublishedAt: now.Add(-time.Minute),
			},
			Reason: reason, Attempts: 1, LastError: "refused", CreatedAt: now,
		}
		if err := h.DB.Push().Settle(context.Background(), delivery.Settlement{DeadLetter: &dl}); err != nil {
			t.Fatal(err)
		}
		ids[i] = dl.ID
	}
	return ids
}

var dlRow = regexp.MustCompile(`name="ids" value="([^"]+)"`)

// listed are the dead letters a page lists.
func listed(p page) []string {
	var out []string
	for _, m := range dlRow.FindAllStringSubmatch(p.Body, -1) {
		out = append(out, m[1])
	}
	return out
}

// TestDeadLetterFilter: the console's filter is the API's, so it holds
// across pages, the API's refusal of it shows beside its fields, and
// "replay all matching" replays what it selects and nothing else.
func TestDeadLetterFilter(t *testing.T) {
	t.Parallel()
	h := newHarness(t, store.SQLite, true)
	apptest.Want(t, h.as(h.Admin, "POST", "/v1/rooms", map[string]any{"identifier": "orders", "managerIdentifier": "team-a"}), http.StatusCreated)
	apptest.Want(t, h.as(h.Admin, "POST", "/v1/rooms/orders/event-types", map[string]any{"identifier": "order.created"}), http.StatusCreated)
	r := h.as(h.Admin, "POST", "/v1/rooms/orders/subscriptions", map[string]any{"type": "PUSH",
		"pushUrl": "http://127.0.0.1:9/hook", "eventTypes": []any{map[string]any{"eventType": "order.created"}}})
	apptest.Want(t, r, http.StatusCreated)
	subID := r.JSON(t)["id"].(string)
	// More permanent failures than a page holds, then the one whose
	// attempts ran out: unfiltered, it is on the second page only.
	reasons := make([]string, 52)
	for i := range reasons {
		reasons[i] = delivery.ReasonPermanent
	}
	reasons[51] = delivery.ReasonExhausted
	ids := storeDeadLetters(t, h, subID, reasons...)
	exhausted := ids[51].String()

	s := secretKeeper{t: t, b: h.browser()}
	s.b.signIn(h.Admin)
	base := "/console/rooms/orders/subscriptions/" + subID + "/dead-letters"

	p := s.get(base)
	want(t, p, http.StatusOK)
	if got := listed(p); len(got) != 50 || strings.Contains(p.Body, exhausted) {
		t.Errorf("unfiltered, the first page lists %d, with the exhausted one: %v", len(got), strings.Contains(p.Body, exhausted))
	}
	if !strings.Contains(p.Body, `id="replay-all">Replay all (`) {
		t.Error("unfiltered, the replay button does not replay all")
	}

	// Filtered by reason: only the exhausted one, on the first page.
	p = s.get(base + "?reason=" + delivery.ReasonExhausted)
	want(t, p, http.StatusOK)
	if got := listed(p); len(got) != 1 || got[0] != exhausted {
		t.Errorf("reason=%s lists %v, want only %s", delivery.ReasonExhausted, got, exhausted)
	}
	if !strings.Contains(p.Body, `id="replay-all">Replay all matching (`) ||
		!strings.Contains(p.Body, `<input type="hidden" name="reason" value="attempts_exhausted">`) {
		t.Error("filtered, the replay button does not say it replays what matches, or its form lacks the filter")
	}

	// The other reason across pages: the next page keeps the filter.
	p = s.get(base + "?reason=" + delivery.ReasonPermanent)
	if got := listed(p); len(got) != 50 {
		t.Errorf("the first page of permanent failures lists %d, want 50", len(got))
	}
	next := regexp.MustCompile(`<a href="([^"]+)" rel="next">`).FindStringSubmatch(p.Body)
	if next == nil {
		t.Fatal("no next page")
	}
	link := strings.ReplaceAll(next[1], "&amp;", "&")
	if u, err := url.Parse(link); err != nil || u.Query().Get("reason") != delivery.ReasonPermanent || u.Query().Get("cursor") == "" {
		t.Fatalf("the next page %q does not keep the filter", link)
	}
	if got := listed(s.get(link)); len(got) != 1 || got[0] != ids[50].String() {
		t.Errorf("the second page of permanent failures lists %v, want only %s", got, ids[50])
	}

	// The API's refusal of the filter, beside the fields it names.
	p = s.get(base + "?since=yesterday")
	want(t, p, http.StatusUnprocessableEntity)
	if e := errorBeside(p, "since"); !strings.Contains(e, "RFC 3339") {
		t.Errorf("the since error beside it: %q", e)
	}
	if !strings.Contains(p.Body, `value="yesterday"`) || strings.Contains(p.Body, `id="replay-all"`) {
		t.Error("the refused filter lost what was typed, or offers to replay")
	}
	at := time.Now().UTC().Format(time.RFC3339)
	p = s.get(base + "?since=" + url.QueryEscape(at) + "&until=" + url.QueryEscape(at))
	want(t, p, http.StatusUnprocessableEntity)
	if e := errorBeside(p, "until"); !strings.Contains(e, "later than since") {
		t.Errorf("the until error beside it: %q", e)
	}
	s.get(base)
	p = s.post(base, url.Values{"action": {"replay-all"}, "reason": {"bogus"}})
	want(t, p, http.StatusUnprocessableEntity)
	if e := errorBeside(p, "reason"); !strings.Contains(e, "must be one of") {
		t.Errorf("the replay's reason error beside it: %q", e)
	}

	// Replay all matching: the exhausted one only, and back to the filter.
	s.get(base + "?reason=" + delivery.ReasonExhausted)
	p = s.post(base, url.Values{"action": {"replay-all"}, "reason": {delivery.ReasonExhausted}})
	want(t, p, http.StatusSeeOther)
	if u, err := url.Parse(p.Location); err != nil || u.Query().Get("reason") != delivery.ReasonExhausted || u.Query().Get("done") != "replayed" {
		t.Errorf("after the replay, to %q", p.Location)
	}
	if p := s.get(p.Location); len(listed(p)) != 0 || !strings.Contains(p.Body, "No dead letter matches the filter") {
		t.Errorf("after the replay, the filter still lists %v", listed(p))
	}
	r = h.as(h.Admin, "GET", "/v1/rooms/orders/subscriptions/"+subID+"/dead-letters?limit=500", nil)
	apptest.Want(t, r, http.StatusOK)
	left := apptest.Decode[api.List[delivery.DeadLetterResponse]](t, r).Items
	if len(left) != 51 {
		t.Fatalf("%d dead letters left, want the 51 permanent failures", len(left))
	}
	for _, dl := range left {
		if dl.Reason != delivery.ReasonPermanent {
			t.Errorf("left: %s of reason %s", dl.ID, dl.Reason)
		}
	}
}
