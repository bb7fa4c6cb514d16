package api

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
)

// TestKindsTable: every kind has its own code, a type URI made of it, an
// error status, a title and its documentation; a kind with a parent has
// the parent's status and is the parent to errors.Is.
func TestKindsTable(t *testing.T) {
	t.Parallel()
	code := regexp.MustCompile(`^[a-z]+(_[a-z]+)*$`)
	seen := map[string]bool{}
	for _, k := range Kinds {
		switch {
		case !code.MatchString(k.Code):
			t.Errorf("code %q is not snake_case", k.Code)
		case seen[k.Code]:
			t.Errorf("code %q is in the table twice", k.Code)
		case k.Type() != "/problems/"+k.Code:
			t.Errorf("%s: type %q", k.Code, k.Type())
		case k.Status < 400 || k.Status > 599 || http.StatusText(k.Status) == "":
			t.Errorf("%s: status %d", k.Code, k.Status)
		case k.Title == "" || k.Meaning == "" || k.Action == "" || k.Error() == "":
			t.Errorf("%s: a title, meaning, action and text are needed: %+v", k.Code, k)
		case k.parent != nil && (k.parent.Status != k.Status || !errors.Is(k, k.parent) || !errors.Is(fmt.Errorf("x: %w", k), k.parent)):
			t.Errorf("%s: not its parent %s to errors.Is, or of another status", k.Code, k.parent.Code)
		case KindOf(k.Code) != k:
			t.Errorf("KindOf(%q) is not the kind", k.Code)
		}
		seen[k.Code] = true
		if k.parent == nil && kindOfStatus(k.Status) != k {
			t.Errorf("%s: two kinds without a parent have status %d", k.Code, k.Status)
		}
	}
	if errors.Is(ErrConflict, ErrAlreadyExists) || errors.Is(ErrInUse, ErrAlreadyExists) {
		t.Error("a parent kind, or a sibling, is not the kind")
	}
	if KindOf("nope") != nil {
		t.Error(`KindOf("nope") is a kind`)
	}
}

// TestProblemOf: each error is answered with the kind it wraps, whatever
// the feature wrapped around it; an echo error by its status; anything else
// is internal_error, whose detail shows nothing of the error.
func TestProblemOf(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		err    error
		want   *Kind
		detail string
	}{
		{"validation", Invalid("identifier", "is required"), ErrValidation, "identifier: is required"},
		{"malformed", &ValidationError{Status: http.StatusBadRequest, Fields: []FieldError{{Field: "body", Message: "malformed JSON"}}}, ErrMalformed, "body: malformed JSON"},
		{"rate limited", &RateLimitedError{RetryAfter: time.Second, Detail: "slow down"}, ErrRateLimited, "slow down"},
		{"unauthorized", fmt.Errorf("%w: no key", ErrUnauthorized), ErrUnauthorized, "no key"},
		{"not found", fmt.Errorf("room %w", ErrNotFound), ErrNotFound, "room not found"},
		{"the kind alone", ErrInUse, ErrInUse, "conflict"},
		{"not found in a field", InField("messages[2].eventType", "", fmt.Errorf("event type %w", ErrNotFound)), ErrNotFound, "messages[2].eventType: event type not found"},
		{"already exists", fmt.Errorf("a room with this identifier already exists: %w", ErrAlreadyExists), ErrAlreadyExists, "a room with this identifier already exists"},
		{"in use", fmt.Errorf("used: %w", ErrInUse), ErrInUse, "used"},
		{"invalid state", fmt.Errorf("TERMINATED: %w", ErrInvalidState), ErrInvalidState, "TERMINATED"},
		{"idempotency", fmt.Errorf("key reused: %w", ErrIdempotencyKeyReused), ErrIdempotencyKeyReused, "key reused"},
		{"limit", fmt.Errorf("%w: 1000 subscriptions", ErrLimitReached), ErrLimitReached, "1000 subscriptions"},
		{"unavailable", fmt.Errorf("database: %w: %w", errors.New("dial tcp: refused"), ErrUnavailable), ErrUnavailable, "database: dial tcp: refused"},
		{"route", echo.ErrNotFound, ErrNotFound, "Not Found"},
		{"method", echo.ErrMethodNotAllowed, ErrMethodNotAllowed, "Method Not Allowed"},
		{"body limit", echo.ErrStatusRequestEntityTooLarge, ErrPayloadTooLarge, "Request Entity Too Large"},
		{"media type", echo.NewHTTPError(http.StatusUnsupportedMediaType, "send JSON"), ErrUnsupportedMediaType, "send JSON"},
		{"header", echo.NewHTTPError(http.StatusRequestHeaderFieldsTooLarge, "too big"), ErrHeaderTooLarge, "too big"},
		{"echo 500", echo.NewHTTPError(http.StatusInternalServerError, "secret"), ErrInternal, internalDetail},
		{"internal kind", fmt.Errorf("secret: %w", ErrInternal), ErrInternal, internalDetail},
		{"unknown", errors.New("secret: disk full"), ErrInternal, internalDetail},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p := toProblem(c.err)
			if p.Code != c.want.Code || p.Type != c.want.Type() || p.Status != c.want.Status || p.Title != c.want.Title || p.Detail != c.detail {
				t.Errorf("%+v, want kind %s with detail %q", p, c.want.Code, c.detail)
			}
		})
	}
	if p := toProblem(InField("eventType", "", fmt.Errorf("event type %w", ErrNotFound))); len(p.Errors) != 1 || p.Errors[0].Field != "eventType" {
		t.Errorf("a not_found about a field names it: %+v", p)
	}
}

// TestProblemOfUnknownStatus: an echo error of a status no kind has is
// RFC 9457's about:blank (no meaning beyond its status), never a kind of
// another status.
func TestProblemOfUnknownStatus(t *testing.T) {
	t.Parallel()
	p := toProblem(echo.NewHTTPError(http.StatusTeapot, "short and stout"))
	if p.Type != "about:blank" || p.Status != http.StatusTeapot || KindOf(p.Code) != nil {
		t.Errorf("%+v", p)
	}
}

// TestErrorHandlerKinds: the answer carries the kind's type, code and title.
func TestErrorHandlerKinds(t *testing.T) {
	t.Parallel()
	rec := serve(t, httptest.NewRequest(http.MethodGet, "/x", nil), func(echo.Context) error {
		return fmt.Errorf("the room is TERMINATED: %w", ErrInvalidState)
	})
	p := problemOfRecorder(t, rec)
	if rec.Code != http.StatusConflict || p.Type != "/problems/invalid_state" || p.Code != "invalid_state" || p.Title != ErrInvalidState.Title {
		t.Errorf("%d %+v", rec.Code, p)
	}
}

// TestProblemTypePage: each kind's type URI leads to its page; a code of
// no kind is a not_found problem.
func TestProblemTypePage(t *testing.T) {
	t.Parallel()
	e := echo.New()
	e.HTTPErrorHandler = ErrorHandler(slog.New(slog.DiscardHandler))
	e.GET(ProblemTypePrefix+":code", ProblemTypePage)
	for _, k := range Kinds {
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, k.Type(), nil))
		body := rec.Body.String()
		if rec.Code != http.StatusOK || rec.Header().Get(echo.HeaderContentType) != echo.MIMETextHTMLCharsetUTF8 ||
			!regexp.MustCompile(`<h1>`+regexp.QuoteMeta(k.Title)+`</h1>`).MatchString(body) || !regexp.MustCompile(`<code>`+k.Code+`</code>`).MatchString(body) {
			t.Errorf("%s: %d %q: %s", k.Type(), rec.Code, rec.Header().Get(echo.HeaderContentType), body)
		}
	}
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/problems/nope", nil))
	if p := problemOfRecorder(t, rec); rec.Code != http.StatusNotFound || p.Code != ErrNotFound.Code {
		t.Errorf("/problems/nope: %d %+v", rec.Code, p)
	}
}
