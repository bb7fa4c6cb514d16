package publish_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/roomhub/messaging-api/app/apptest"
	"github.com/roomhub/messaging-api/publish"
	"github.com/roomhub/messaging-api/pull"
	"github.com/roomhub/messaging-api/store/storetest"
)

// exactPayload is a compact payload whose every byte a re-encoding would
// change: escapes of NUL, of a lone surrogate and of characters that need
// none, HTML characters, U+2028 raw, numbers in several notations.
const exactPayload = `{"nul":"a\u0000b","lone":"\ud800","esc":"\u00e9\/\"\\\t","raw":"é€😀<b>&amp;</b>` + "\u2028" +
	`","n":[1.0,1e2,-0,12345678901234567890123,0.1e-7],"deep":{"":[null,true,false,{}]}}`

// TestPayloadBytesKept: a payload goes from the publish to a pull, a push
// and the message log byte for byte, on PostgreSQL and SQLite alike.
func TestPayloadBytesKept(t *testing.T) {
	t.Parallel()
	if !json.Valid([]byte(exactPayload)) {
		t.Fatal("the test payload is not JSON")
	}
	dbs := map[string]func(t *testing.T) string{
		"sqlite":   func(*testing.T) string { return "" }, // StartService's own file
		"postgres": func(t *testing.T) string { return storetest.PostgresSchemaURL(t) },
	}
	for name, dbURL := range dbs {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			env := map[string]string{"OUTBOX_POLL_INTERVAL": "100ms"}
			if u := dbURL(t); u != "" {
				env["DATABASE_URL"] = u
			}
			c := apptest.StartService(t, env)
			hook := apptest.NewHook(t, func(_ int, w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
			c.SetupPushRoom("bytes", "", hook.URL())
			var puller struct {
				ID string `json:"id"`
			}
			c.CallJSON("POST", "/v1/rooms/bytes/subscriptions", `{"type":"PULL","eventTypes":[{"eventType":"tick"}]}`, http.StatusCreated, &puller)

			published := c.Publish("bytes", `{"eventType":"tick","payload":`+exactPayload+`}`)

			if got := hook.WaitFor(1, 10*time.Second)[0].Body; !bytes.Equal(got, []byte(exactPayload)) {
				t.Errorf("pushed body:\n got %s\nwant %s", got, exactPayload)
			}
			var pulled struct {
				Messages []pull.Message `json:"messages"`
			}
			c.CallJSON("POST", "/v1/rooms/bytes/subscriptions/"+puller.ID+"/pull", `{"waitMs":5000}`, http.StatusOK, &pulled)
			if len(pulled.Messages) != 1 || !bytes.Equal(pulled.Messages[0].Payload, []byte(exactPayload)) {
				var got []string
				for _, m := range pulled.Messages {
					got = append(got, string(m.Payload))
				}
				t.Errorf("pulled payloads:\n got %s\nwant [%s]", got, exactPayload)
			}
			var logged publish.EventResponse
			c.CallJSON("GET", "/v1/rooms/bytes/messages/"+published.EventID, "", http.StatusOK, &logged)
			if !bytes.Equal(logged.Payload, []byte(exactPayload)) {
				t.Errorf("message log:\n got %s\nwant %s", logged.Payload, exactPayload)
			}
		})
	}
}
