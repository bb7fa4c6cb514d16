package console

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/roomhub/messaging-api/publish"
	"github.com/roomhub/messaging-api/rooms"
)

// view is what every page template gets.
type view struct {
	Title string
	Nav   string // the navigation entry to mark current
	Me    me
	// CSRF is the token every form of the page sends back.
	CSRF string
	// MayKeys shows the API keys entry of the navigation.
	MayKeys bool
	Flash   string
	// Refresh reloads the page after so many seconds (0: never).
	Refresh int
	Data    any
}

// pageNames are the templates under templates/ that are whole pages; each
// is parsed with the layout and the shared pieces.
var pageNames = []string{
	"login", "error", "dashboard", "rooms", "room", "eventtype", "publish", "timeline", "messages",
	"subscription_form", "subscription", "deadletters", "deadletter", "keys",
}

func parsePages() map[string]*template.Template {
	pages := map[string]*template.Template{}
	for _, name := range pageNames {
		pages[name] = template.Must(template.New(name).Funcs(funcs).ParseFS(templateFiles,
			"templates/layout.html", "templates/parts.html", "templates/"+name+".html"))
	}
	return pages
}

var funcs = template.FuncMap{
	"ms":     formatMs,
	"msp":    func(p *int64) string { return optional(p, formatMs) },
	"dur":    func(d time.Duration) string { return formatMs(d.Milliseconds()) },
	"when":   formatTime,
	"whenp":  func(t *time.Time) string { return optional(t, formatTime) },
	"intp":   func(p *int) string { return optional(p, strconv.Itoa) },
	"int64p": func(p *int64) string { return optional(p, func(v int64) string { return strconv.FormatInt(v, 10) }) },
	"floatp": func(p *float64) string {
		return optional(p, func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) })
	},
	"float": func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) },
	"strp":  func(p *string) string { return optional(p, func(s string) string { return s }) },
	"json":  prettyJSON,
	// some reports whether raw holds a value: JSON null is none.
	"some": func(raw json.RawMessage) bool { return len(raw) > 0 && string(raw) != "null" },
	"fld": func(f *form, name, label, typ string, rest ...string) field {
		fd := field{Form: f, Name: name, Label: label, Type: typ}
		if len(rest) > 0 {
			fd.Hint = rest[0]
		}
		if len(rest) > 1 {
			fd.Placeholder = rest[1]
		}
		return fd
	},
	"sel": func(f *form, name, label string, opts []option, hint string) field {
		return field{Form: f, Name: name, Label: label, Type: "select", Options: opts, Hint: hint}
	},
	"fixed": func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) },
	"curves": func() []option {
		out := []option{{Value: "", Label: "(default: linear)"}}
		for _, c := range []string{rooms.BackoffLinear, rooms.BackoffArithmetic, rooms.BackoffGeometric, rooms.BackoffExponential} {
			out = append(out, option{Value: c, Label: c})
		}
		return out
	},
	"req": func(f field) field {
		f.Required = true
		return f
	},
	"approvals": func() []option {
		return []option{
			{Value: string(rooms.ApprovalAutomatic), Label: "AUTOMATIC: new subscriptions start as asked"},
			{Value: string(rooms.ApprovalManual), Label: "MANUAL: a subscriber's new subscriptions wait for the manager's approval"},
		}
	},
	"inheritBool": func() []option {
		return []option{{Value: "", Label: "(the room's)"}, {Value: "true", Label: "on"}, {Value: "false", Label: "off"}}
	},
	"authTypes": func() []option {
		return []option{{Value: "none", Label: "none"}, {Value: "basic", Label: "basic: username and password"},
			{Value: "bearer", Label: "bearer: a token"}, {Value: "headers", Label: "headers of your choosing"}}
	},
	"short": short,
	"inc":   func(n int) int { return n + 1 },
	"lastStatus": func(d publish.DeliveryResponse) string {
		if len(d.Attempts) == 0 {
			return ""
		}
		return string(d.Attempts[len(d.Attempts)-1].Status)
	},
}

func optional[T any](p *T, f func(T) string) string {
	if p == nil {
		return ""
	}
	return f(*p)
}

// formatMs writes a number of milliseconds for people: 250 ms, 1.5 s, 2 min 5 s.
func formatMs(ms int64) string {
	switch d := time.Duration(ms) * time.Millisecond; {
	case ms < 1000:
		return strconv.FormatInt(ms, 10) + " ms"
	case d < time.Minute:
		return strconv.FormatFloat(math.Round(d.Seconds()*100)/100, 'f', -1, 64) + " s"
	case d < time.Hour:
		return fmt.Sprintf("%d min %d s", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%d h %d min", int(d.Hours()), int(d.Minutes())%60)
	default:
		return fmt.Sprintf("%.1f days", d.Hours()/24)
	}
}

func formatTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05.000 UTC")
}

// prettyJSON indents JSON for reading; anything else is shown as it is.
func prettyJSON(raw json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Indent(&b, raw, "", "  "); err != nil {
		return string(raw)
	}
	return b.String()
}

// render writes the page name with v.
func (cn *Console) render(c echo.Context, status int, name string, v view) error {
	var b bytes.Buffer
	if err := cn.pages[name].ExecuteTemplate(&b, "layout", v); err != nil {
		return fmt.Errorf("render %s: %w", name, err)
	}
	return c.HTMLBlob(status, b.Bytes())
}

// renderError writes the error page.
func (cn *Console) renderError(c echo.Context, status int, detail string) error {
	return cn.render(c, status, "error", view{Title: http.StatusText(status), Data: detail})
}

// render writes the page name for a signed-in browser, with its session's
// identity and CSRF token.
func (r *request) render(status int, name, title, nav string, data any) error {
	return r.cn.render(r.Context, status, name, r.view(title, nav, data))
}

func (r *request) view(title, nav string, data any) view {
	return view{
		Title: title, Nav: nav, Me: r.me, CSRF: csrfToken(r.sid), Data: data,
		MayKeys: r.api.may(http.MethodGet, "/v1/api-keys"), Flash: flashes[r.QueryParam("done")],
	}
}

// flashes are the messages a redirect after a change may ask for (?done=).
var flashes = map[string]string{
	"room-created":         "The room was created.",
	"room-updated":         "The room's settings were saved.",
	"room-terminated":      "The room was terminated: it accepts no more events.",
	"event-type-created":   "The event type was created.",
	"version-created":      "The version was created.",
	"paused":               "The subscription is paused: its messages wait until it is resumed.",
	"resumed":              "The subscription is active again.",
	"terminated":           "The subscription was terminated.",
	"replayed":             "The dead letters were replayed as new events.",
	"deleted":              "The dead letters were deleted.",
	"revoked":              "The API key was revoked.",
	"subscription-updated": "The subscription's settings were saved.",
	"approved":             "The subscription was approved: it receives the events published from now on.",
	"rejected":             "The subscription was rejected.",
	"circuit-reset":        "The circuit was closed: deliveries go again.",
}
