package console

import (
	"encoding/json"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"github.com/roomhub/messaging-api/api"
)

// form is what a page's form holds: the values sent (or shown), and the
// API's refusal of them, whose field errors go beside the fields they name.
type form struct {
	Values  url.Values
	Problem *api.Problem
}

func newForm(v url.Values) *form {
	if v == nil {
		v = url.Values{}
	}
	return &form{Values: v}
}

// refused is f carrying the API's refusal p.
func (f *form) refused(p *apiError) *form {
	f.Problem = &p.Problem
	return f
}

// Get is the value of the field name.
func (f *form) Get(name string) string { return f.Values.Get(name) }

// Checked reports whether the checkbox name was ticked.
func (f *form) Checked(name string) bool {
	v := f.Values.Get(name)
	return v == "on" || v == "true"
}

// Is reports whether the field name holds value (a selected option).
func (f *form) Is(name, value string) bool { return f.Values.Get(name) == value }

// names reports whether an API error about field concerns the form field
// name: the field itself, or a member or element of it.
func names(name, field string) bool {
	return field == name || strings.HasPrefix(field, name+".") || strings.HasPrefix(field, name+"[")
}

// Errors are the API's messages about the field name (and what is inside it).
func (f *form) Errors(name string) []string {
	if f.Problem == nil {
		return nil
	}
	var out []string
	for _, e := range f.Problem.Errors {
		if names(name, e.Field) {
			out = append(out, where(name, e)+e.Message)
		}
	}
	return out
}

// Whole are the API's messages about the list name as a whole: the list
// itself, or a member named without an index (as a type error names it),
// which no one row's field shows.
func (f *form) Whole(name string) []string {
	if f.Problem == nil {
		return nil
	}
	var out []string
	for _, e := range f.Problem.Errors {
		if e.Field == name || strings.HasPrefix(e.Field, name+".") {
			out = append(out, where(name, e)+e.Message)
		}
	}
	return out
}

// Own are the API's messages about name itself, not about a member of it
// (which the member's own field shows).
func (f *form) Own(name string) []string {
	if f.Problem == nil {
		return nil
	}
	var out []string
	for _, e := range f.Problem.Errors {
		if e.Field == name {
			out = append(out, where(name, e)+e.Message)
		}
	}
	return out
}

// where says which part of the field name an error concerns: its JSON
// pointer when the API gives one (a part of a JSON value, such as an
// attribute filter's condition), else the member it names.
func where(name string, e api.FieldError) string {
	switch {
	case e.Pointer != "":
		return e.Pointer + ": "
	case e.Field != name:
		return e.Field + ": "
	}
	return ""
}

// Invalid reports whether the API refused the field name.
func (f *form) Invalid(name string) bool { return len(f.Errors(name)) > 0 }

var notIDChars = regexp.MustCompile(`[^a-zA-Z0-9_-]+`)

// ID is the HTML id of the field name's input.
func (f *form) ID(name string) string { return "f-" + notIDChars.ReplaceAllString(name, "-") }

// ErrID is the HTML id of the field name's error messages.
func (f *form) ErrID(name string) string { return "e-" + notIDChars.ReplaceAllString(name, "-") }

// Failed reports whether the API refused the form.
func (f *form) Failed() bool { return f.Problem != nil }

// body is a JSON request body built from form fields.
type body map[string]any

// set puts v at the dotted path (retryPolicy.minimumDelay).
func (b body) set(path string, v any) {
	m := b
	parts := strings.Split(path, ".")
	for _, p := range parts[:len(parts)-1] {
		next, ok := m[p].(body)
		if !ok {
			next = body{}
			m[p] = next
		}
		m = next
	}
	m[parts[len(parts)-1]] = v
}

// blank says what an empty field becomes.
type blank int

const (
	omit   blank = iota // left out: the API's default, or unchanged by a PATCH
	asNull              // null: cleared by a PATCH
)

// number is the JSON value of a numeric field: a number when the text is
// one, else the text itself, which the API refuses with its own message.
func number(s string) any {
	s = strings.TrimSpace(s)
	if _, err := strconv.ParseFloat(s, 64); err == nil && json.Valid([]byte(s)) {
		return json.Number(s)
	}
	return s
}

// numbers sets the numeric fields names of f in b.
func (b body) numbers(f *form, ifBlank blank, names ...string) {
	for _, n := range names {
		switch v := strings.TrimSpace(f.Get(n)); {
		case v != "":
			b.set(n, number(v))
		case ifBlank == asNull:
			b.set(n, nil)
		}
	}
}

// texts sets the text fields names of f in b.
func (b body) texts(f *form, ifBlank blank, names ...string) {
	for _, n := range names {
		switch v := strings.TrimSpace(f.Get(n)); {
		case v != "":
			b.set(n, v)
		case ifBlank == asNull:
			b.set(n, nil)
		}
	}
}

// jsonValue is the JSON of a field holding JSON: the text itself when it is
// JSON, else the text as a string, which the API refuses with its message.
func jsonValue(s string) any {
	if t := strings.TrimSpace(s); json.Valid([]byte(t)) {
		return json.RawMessage(t)
	}
	return s
}

// splitList splits a comma-separated field, dropping blanks.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// field describes one input for the field template.
type field struct {
	Form               *form
	Name, Label, Type  string
	Hint, Placeholder  string
	Options            []option
	Required, ReadOnly bool
}

type option struct{ Value, Label string }

// ID is the input's HTML id.
func (f field) ID() string { return f.Form.ID(f.Name) }

// HintID is the HTML id of the input's hint.
func (f field) HintID() string { return "h" + strings.TrimPrefix(f.Form.ID(f.Name), "f") }

// ErrID is the HTML id of the input's error messages.
func (f field) ErrID() string { return f.Form.ErrID(f.Name) }

// Value is what the input shows.
func (f field) Value() string { return f.Form.Get(f.Name) }

// Errors are the API's messages about the input.
func (f field) Errors() []string { return f.Form.Errors(f.Name) }

// DescribedBy lists the ids of the hint and errors that describe the input.
func (f field) DescribedBy() string {
	var ids []string
	if f.Hint != "" {
		ids = append(ids, f.HintID())
	}
	if len(f.Errors()) > 0 {
		ids = append(ids, f.ErrID())
	}
	return strings.Join(ids, " ")
}
