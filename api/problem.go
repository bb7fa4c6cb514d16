package api

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"
)

// Problem is an RFC 9457 problem details document.
type Problem struct {
	Type string `json:"type"`
	// Code is the kind's machine code (Kind.Code), which clients branch on.
	Code      string       `json:"code"`
	Title     string       `json:"title"`
	Status    int          `json:"status"`
	Detail    string       `json:"detail,omitempty"`
	Instance  string       `json:"instance,omitempty"`
	RequestID string       `json:"requestId,omitempty"`
	Errors    []FieldError `json:"errors,omitempty"`
}

// ProblemContentType is the media type of every error response.
const ProblemContentType = "application/problem+json"

// ErrorHandler turns any error a handler returns into a problem response:
// unknown errors become a generic 500. It logs each error to logger; the
// service passes a discarding one and logs the error on the request's
// access line instead (app/accesslog.go), so a request is one line.
func ErrorHandler(logger *slog.Logger) echo.HTTPErrorHandler {
	return func(err error, c echo.Context) {
		if c.Response().Committed {
			return
		}
		p := toProblem(err)
		p.Instance = c.Request().URL.Path
		p.RequestID = c.Response().Header().Get(echo.HeaderXRequestID)
		attrs := []any{
			slog.String("method", c.Request().Method),
			slog.String("path", c.Request().URL.Path),
			slog.Int("status", p.Status),
			slog.String("request_id", p.RequestID),
		}
		if p.Status >= 500 {
			logger.ErrorContext(c.Request().Context(), "request failed", append(attrs, slog.Any("error", err))...)
		} else {
			logger.DebugContext(c.Request().Context(), "request rejected", append(attrs, slog.String("error", err.Error()))...)
		}
		var rl *RateLimitedError
		switch {
		case errors.As(err, &rl):
			c.Response().Header().Set("Retry-After", strconv.Itoa(retryAfterSeconds(rl.RetryAfter)))
		case p.Status == http.StatusServiceUnavailable || p.Status == http.StatusTooManyRequests:
			c.Response().Header().Set("Retry-After", "1")
		case p.Status == http.StatusUnauthorized:
			c.Response().Header().Set("WWW-Authenticate", `Bearer realm="messaging-api"`)
		}
		c.Response().Header().Set(echo.HeaderContentType, ProblemContentType)
		c.Response().WriteHeader(p.Status)
		if c.Request().Method == http.MethodHead {
			return
		}
		_ = json.NewEncoder(c.Response()).Encode(p)
	}
}

func toProblem(err error) Problem {
	p := problemOf(err)
	var fc *FieldCause
	if p.Status < 500 && len(p.Errors) == 0 && errors.As(err, &fc) {
		p.Errors = []FieldError{fc.FieldError}
	}
	return p
}

// problemOf is the problem answering err: the kind it wraps, with its
// fields if it is a ValidationError; an echo error (an unknown route, a
// method, a body limit) by its status; anything else is internal_error.
func problemOf(err error) Problem {
	var ve *ValidationError
	var he *echo.HTTPError
	switch k := kindOf(err); {
	case k == ErrInternal:
		return newProblem(k, internalDetail, nil)
	case k != nil && errors.As(err, &ve):
		detail := "The request has invalid fields."
		if len(ve.Fields) == 1 {
			detail = ve.Fields[0].Field + ": " + ve.Fields[0].Message
		}
		return newProblem(k, detail, ve.Fields)
	case k != nil:
		return newProblem(k, detailOf(err, k), nil)
	case errors.As(err, &he):
		k := kindOfStatus(he.Code)
		detail := http.StatusText(he.Code)
		if s, ok := he.Message.(string); ok && he.Code < 500 {
			detail = s
		}
		if k == nil {
			// A status no kind has (none is known to reach here): RFC 9457's
			// about:blank, a problem with no meaning beyond its status. No
			// test sees one: the harness refuses types outside Kinds.
			return Problem{Type: "about:blank", Code: "http_error", Title: http.StatusText(he.Code), Status: he.Code, Detail: detail}
		}
		if k.Status >= 500 {
			detail = internalDetail
		}
		return newProblem(k, detail, nil)
	default:
		return newProblem(ErrInternal, internalDetail, nil)
	}
}

// detailOf is err's text without the kind's own text that its sentinels
// add ("room is TERMINATED: conflict", "forbidden: a subscriber key may
// not …"): the problem's code and title say the kind already.
func detailOf(err error, k *Kind) string {
	s := err.Error()
	for ; k != nil; k = k.parent {
		if t, ok := strings.CutSuffix(s, ": "+k.text); ok && t != "" {
			return t
		}
		if t, ok := strings.CutPrefix(s, k.text+": "); ok && t != "" {
			return t
		}
	}
	return s
}

// internalDetail is the detail of every internal_error: the error itself is
// logged, never shown.
const internalDetail = "The server could not complete the request; it has been logged."

func newProblem(k *Kind, detail string, fields []FieldError) Problem {
	return Problem{
		Type:   k.Type(),
		Code:   k.Code,
		Title:  k.Title,
		Status: k.Status,
		Detail: detail,
		Errors: fields,
	}
}
