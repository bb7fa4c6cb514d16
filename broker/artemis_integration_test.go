package broker

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
)

// artemisTestURL returns BROKER_TEST_URL when it names an Artemis broker, and
// skips the test otherwise: with -short, for another dialect, or when it is
// unset outside CI (on CI a missing broker fails).
func artemisTestURL(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: no real broker")
	}
	raw := os.Getenv("BROKER_TEST_URL")
	if raw == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("BROKER_TEST_URL is not set on CI: start Artemis (bash scripts/artemis.sh start) and set it")
		}
		t.Skip("BROKER_TEST_URL is not set")
	}
	cfg, err := parseStompURL(raw)
	if err != nil || cfg.dialect != "artemis" || isEmbeddedURL(raw) {
		t.Skip("Artemis only; BROKER_TEST_URL is another broker")
	}
	return raw
}

func openArtemis(t *testing.T, raw string) *stompBroker {
	t.Helper()
	cfg, err := parseStompURL(raw)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	b, err := openStomp(ctx, cfg, slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})), time.Now)
	if err != nil {
		t.Fatalf("open %s: %v", Redact(raw), err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// artemisOf is the Artemis dialect of b.
func artemisOf(b *stompBroker) *artemis { return b.dialect.(*artemis) }

func manage(t *testing.T, b *stompBroker, op string, params ...any) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	r, err := artemisOf(b).manage(ctx, op, params...)
	if err != nil {
		t.Fatalf("%s: %v", op, err)
	}
	return r
}

// withAddressSettings adds settings for match for the test's duration.
func withAddressSettings(t *testing.T, b *stompBroker, match string, settings map[string]any) {
	t.Helper()
	js, _ := json.Marshal(settings)
	manage(t, b, "addAddressSettings", match, string(js))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := artemisOf(b).manage(ctx, "removeAddressSettings", match); err != nil {
			t.Errorf("removeAddressSettings %s: %v", match, err)
		}
	})
}

// messageCount is the number of messages in the queue named name.
func messageCount(t *testing.T, b *stompBroker, name string) int {
	t.Helper()
	filter, _ := json.Marshal(map[string]string{"field": "name", "operation": "EQUALS", "value": name})
	var page struct {
		Data []struct {
			MessageCount string `json:"messageCount"`
		} `json:"data"`
	}
	raw := manage(t, b, "listQueues", string(filter), 1, 2)
	if err := json.Unmarshal([]byte(raw), &page); err != nil || len(page.Data) != 1 {
		t.Fatalf("listQueues %s: %s (%v)", name, raw, err)
	}
	n, err := strconv.Atoi(page.Data[0].MessageCount)
	if err != nil {
		t.Fatalf("listQueues %s: messageCount %q", name, page.Data[0].MessageCount)
	}
	return n
}

func queueNames(t *testing.T, b *stompBroker) []string {
	t.Helper()
	var names []string
	if err := json.Unmarshal([]byte(manage(t, b, "getQueueNames")), &names); err != nil {
		t.Fatalf("getQueueNames: %v", err)
	}
	return names
}

// TestArtemisManagementLeavesNoQueues: every management call makes a reply
// queue, which auto-delete does not remove where "#" turns it off; none may
// stay after queue create/delete cycles and Prepare.
func TestArtemisManagementLeavesNoQueues(t *testing.T) {
	raw := artemisTestURL(t)
	b, lister := openArtemis(t, raw), openArtemis(t, raw)
	var mu sync.Mutex
	var made []string
	artemisOf(b).replyQueueMade = func(name string) {
		mu.Lock()
		defer mu.Unlock()
		made = append(made, name)
	}
	ctx := t.Context()
	var dests []string
	for range 5 {
		d := Destination{Address: "room-test-" + uuid.NewString(), Queue: "subscription-" + uuid.NewString()}
		dests = append(dests, d.Queue)
		if err := b.EnsureQueue(ctx, d); err != nil {
			t.Fatalf("EnsureQueue: %v", err)
		}
		if err := b.DeleteQueue(ctx, d); err != nil {
			t.Fatalf("DeleteQueue: %v", err)
		}
	}
	if _, err := b.Prepare(ctx, []string{"room-test-prepare"}); err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	if len(made) < 12 {
		t.Fatalf("%d management calls seen, want at least 12", len(made))
	}
	names := queueNames(t, lister)
	for _, n := range append(made, dests...) {
		if slices.Contains(names, n) {
			t.Errorf("queue %s left behind", n)
		}
	}
}

// TestArtemisPrepareRefusesMaxDeliveryAttempts: a broker that would count
// dropped connections as delivery attempts and move messages to its own DLQ
// is refused, with the setting named.
func TestArtemisPrepareRefusesMaxDeliveryAttempts(t *testing.T) {
	b := openArtemis(t, artemisTestURL(t))
	prefix := "mda-test-" + uuid.NewString()
	withAddressSettings(t, b, prefix+".#", map[string]any{"maxDeliveryAttempts": 10})
	warnings, err := b.Prepare(t.Context(), []string{prefix + ".room"})
	if !errors.Is(err, ErrMisconfigured) {
		t.Fatalf("Prepare = %v (warnings %q), want ErrMisconfigured", err, warnings)
	}
	if !strings.Contains(err.Error(), "max-delivery-attempts is 10") || !strings.Contains(err.Error(), "maxDeliveryAttempts=-1") {
		t.Errorf("error does not name the setting and its fix: %v", err)
	}
	// The test broker runs with deploy/artemis/broker.properties (as
	// scripts/artemis.sh and docker-compose.yml start it): every key applies.
	warnings, err = b.Prepare(t.Context(), []string{"room-" + uuid.NewString()})
	if err != nil {
		t.Errorf("Prepare on the settings of broker.properties: %v", err)
	}
	if len(warnings) > 0 {
		t.Errorf("Prepare on the settings of broker.properties warns: %q", warnings)
	}
}

func TestUnappliedProperties(t *testing.T) {
	// As Artemis 2.40 reports a misspelt key of a file given to run --properties.
	status := `{"configuration":{"properties":{"bp.properties":{"alder32":"1","errors":[` +
		`{"value":"addressSettings.\"#\".autoDeleteQueue=false","reason":"java.lang.reflect.InvocationTargetException: No accessor method descriptor for: autoDeleteQueue"}]},` +
		`"system-brokerconfig.":{"alder32":"1"}}},"server":{"state":"STARTED"}}`
	got := unappliedProperties(status)
	want := []string{`bp.properties: addressSettings."#".autoDeleteQueue=false was not applied: java.lang.reflect.InvocationTargetException: No accessor method descriptor for: autoDeleteQueue`}
	if !slices.Equal(got, want) {
		t.Errorf("unappliedProperties = %q, want %q", got, want)
	}
	if got := unappliedProperties(`{"configuration":{"properties":{"broker.properties":{"alder32":"3","errors":[]}}}}`); len(got) != 0 {
		t.Errorf("no errors: got %q", got)
	}
}

// TestArtemisPrepareWithoutAutoCreate: with auto-create-queues off, Artemis
// answers a SEND to a missing queue of an existing address with a RECEIPT and
// drops the message. The broker creates each queue before its first send
// unless Prepare found that the broker creates queues itself, so nothing is
// dropped, before Prepare or after it.
func TestArtemisPrepareWithoutAutoCreate(t *testing.T) {
	raw := artemisTestURL(t)
	admin := openArtemis(t, raw)
	ctx := t.Context()
	address := "noauto-test-" + uuid.NewString()
	withAddressSettings(t, admin, address, map[string]any{"autoCreateQueues": false, "maxDeliveryAttempts": -1})
	// Management calls make their reply queues themselves: they work with
	// auto-create off there too.
	withAddressSettings(t, admin, mgmtReplyPrefix+"#", map[string]any{"autoCreateQueues": false, "autoCreateAddresses": false})
	existing := Destination{Address: address, Queue: "existing"}
	if err := admin.EnsureQueue(ctx, existing); err != nil {
		t.Fatalf("EnsureQueue: %v", err)
	}
	var made []Destination
	t.Cleanup(func() {
		for _, d := range append(made, existing) {
			_ = admin.DeleteQueue(context.Background(), d)
		}
	})
	// kept sends to a new queue of address and reports whether the broker
	// kept the message: its receipt comes once the message is in the queue or
	// dropped, so the queue, made afterwards if missing, counts it or not.
	kept := func(t *testing.T, b *stompBroker) bool {
		t.Helper()
		d := Destination{Address: address, Queue: "q-" + uuid.NewString()[:8]}
		made = append(made, d)
		if err := b.Send(ctx, Message{Destination: d, Body: []byte("m"), Attempt: 1}); err != nil {
			t.Fatalf("Send: %v", err)
		}
		if err := admin.EnsureQueue(ctx, d); err != nil {
			t.Fatalf("EnsureQueue: %v", err)
		}
		return messageCount(t, admin, d.Queue) == 1
	}

	raw1 := openArtemis(t, raw)
	artemisOf(raw1).ensureBeforeSend.Store(false)
	if kept(t, raw1) {
		t.Fatal("Artemis kept a message sent to a missing queue with auto-create-queues off: the setting did not take effect")
	}
	if !kept(t, openArtemis(t, raw)) {
		t.Error("before Prepare: the message sent to a missing queue was dropped")
	}
	prepared := openArtemis(t, raw)
	warnings, err := prepared.Prepare(ctx, []string{address})
	if err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	if !slices.ContainsFunc(warnings, func(w string) bool { return strings.Contains(w, "auto-create-queues is off") }) {
		t.Errorf("warnings %q do not name auto-create-queues", warnings)
	}
	if !kept(t, prepared) {
		t.Error("after Prepare: the message sent to a missing queue was dropped")
	}
	if _, err := prepared.Prepare(ctx, []string{"room-" + uuid.NewString()}); err != nil {
		t.Fatal(err)
	}
	if artemisOf(prepared).ensureBeforeSend.Load() {
		t.Error("Prepare on addresses that auto-create queues left ensureBeforeSend on")
	}
}

// TestArtemisLoginWithEscapes: Artemis reads CONNECT headers as written, so a
// password with ':' or '\' must not be escaped the way other frames are.
func TestArtemisLoginWithEscapes(t *testing.T) {
	raw := artemisTestURL(t)
	admin := openArtemis(t, raw)
	user, password := "escape-test-"+uuid.NewString()[:8], `p:a\ss:w\\ord`
	manage(t, admin, "addUser", user, password, "amq", true)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = artemisOf(admin).manage(ctx, "removeUser", user)
	})
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(user, password)
	b := openArtemis(t, u.String())
	d := Destination{Address: "room-test-" + uuid.NewString(), Queue: "login"}
	t.Cleanup(func() { _ = admin.DeleteQueue(context.Background(), d) })
	if err := b.Send(t.Context(), Message{Destination: d, Body: []byte("x"), Attempt: 1}); err != nil {
		t.Fatalf("Send as %s: %v", user, err)
	}
}

// TestArtemisQueueNameTaken: Artemis queue names are broker-wide; a queue
// name that belongs to another address is refused, not silently kept (a SEND
// to the FQQN would be dropped).
func TestArtemisQueueNameTaken(t *testing.T) {
	b := openArtemis(t, artemisTestURL(t))
	ctx := t.Context()
	name := "taken-" + uuid.NewString()
	first := Destination{Address: "addr-a-" + uuid.NewString()[:8], Queue: name}
	if err := b.EnsureQueue(ctx, first); err != nil {
		t.Fatalf("EnsureQueue: %v", err)
	}
	t.Cleanup(func() { _ = b.DeleteQueue(context.Background(), first) })
	if err := b.EnsureQueue(ctx, first); err != nil {
		t.Fatalf("EnsureQueue again: %v", err)
	}
	other := Destination{Address: "addr-b-" + uuid.NewString()[:8], Queue: name}
	err := b.EnsureQueue(ctx, other)
	if !errors.Is(err, ErrMisconfigured) || !strings.Contains(err.Error(), first.Address) {
		t.Fatalf("EnsureQueue of a taken name = %v, want ErrMisconfigured naming %s", err, first.Address)
	}
}
