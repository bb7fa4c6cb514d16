package console

import (
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/roomhub/messaging-api/auth"
)

type keysData struct {
	Keys  []auth.KeyResponse
	Next  string
	Form  *form
	Roles []option
	// Created is the new key, whose token is shown once.
	Created *auth.KeyResponse
}

func (cn *Console) keys(r *request) error {
	return r.keysPage(newForm(url.Values{"role": {"publisher"}}), nil, http.StatusOK)
}

func (r *request) keysPage(f *form, created *auth.KeyResponse, status int) error {
	page, err := list[auth.KeyResponse](r, "/v1/api-keys", r.listQuery(pageSize))
	if err != nil {
		return err
	}
	d := keysData{Keys: page.Items, Next: r.nextPage(page.NextCursor), Form: f, Created: created}
	for _, role := range auth.Roles {
		d.Roles = append(d.Roles, option{Value: role, Label: role})
	}
	return r.render(status, "keys", "API keys", "keys", d)
}

// grants reads the rooms field: one grant per line, a room's id or
// identifier, then optionally a colon and the event types it allows.
func grants(text string) []body {
	out := []body{}
	for _, line := range strings.Split(text, "\n") {
		room, types, _ := strings.Cut(line, ":")
		if room = strings.TrimSpace(room); room == "" {
			continue
		}
		g := body{"roomId": room}
		if ts := splitList(types); len(ts) > 0 {
			g["eventTypes"] = ts
		}
		out = append(out, g)
	}
	return out
}

func (cn *Console) createKey(r *request) error {
	f := newForm(r.formValues())
	b := body{}
	b.texts(f, omit, "name", "role", "subject")
	b.numbers(f, omit, "publishRateLimit", "publishBurst")
	if g := grants(f.Get("rooms")); len(g) > 0 {
		b["rooms"] = g
	}
	if s := strings.TrimSpace(f.Get("expiresAt")); s != "" {
		// A datetime-local field has no zone: the form says it is UTC.
		if t, err := time.Parse("2006-01-02T15:04", s); err == nil {
			b["expiresAt"] = t.UTC().Format(time.RFC3339)
		} else {
			b["expiresAt"] = s // the API names what is wrong with it
		}
	}
	var k auth.KeyResponse
	if err := r.api.do(http.MethodPost, "/v1/api-keys", b, &k); err != nil {
		if p := refusal(err); p != nil {
			return r.keysPage(f.refused(p), nil, p.Status)
		}
		return err
	}
	return r.keysPage(newForm(url.Values{"role": {"publisher"}}), &k, http.StatusCreated)
}

func (cn *Console) revokeKey(r *request) error {
	if err := r.api.do(http.MethodDelete, path("api-keys", r.Param("key")), nil, nil); err != nil {
		if p := refusal(err); p != nil {
			return r.keysPage(newForm(nil).refused(p), nil, p.Status)
		}
		return err
	}
	return r.Redirect(http.StatusSeeOther, "/console/api-keys?done=revoked")
}
