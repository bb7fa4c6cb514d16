// Package client is a Go client of the messaging API. client.gen.go is
// generated from openapi.yaml by oapi-codegen (`make generate`); this file
// adds New, which makes a client that authenticates with an API key, and
// lets a problem answer be returned as an error.
//
//	c, err := client.New("http://localhost:8080", os.Getenv("API_KEY"))
//	...
//	resp, err := c.CreateRoomWithResponse(ctx, client.CreateRoomJSONRequestBody{
//		Identifier: "orders", ManagerIdentifier: ptr("team-a"),
//	})
//	if err != nil { ... }                        // the request could not be made
//	if err := client.Check(resp); err != nil { ... } // not a 2xx: a *Problem
//	room := resp.JSON201
//
// Each operation of openapi.yaml is a method (its operationId) whose answer
// has one field per documented status: JSON201 for a 201, and for errors the
// problem document (ApplicationproblemJSON422 for a 422, and so on).
package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// DefaultTimeout bounds each request of a client New makes without its own
// HTTP client: longer than the longest pull wait (30 s).
const DefaultTimeout = time.Minute

// New returns a client of the service at baseURL (such as
// "http://localhost:8080") that sends apiKey, unless it is empty, as
// "Authorization: Bearer <apiKey>" on every request. Its HTTP client times
// out after DefaultTimeout; WithHTTPClient among opts replaces it.
func New(baseURL, apiKey string, opts ...ClientOption) (*ClientWithResponses, error) {
	first := []ClientOption{WithHTTPClient(&http.Client{Timeout: DefaultTimeout})}
	if apiKey != "" {
		first = append(first, WithRequestEditorFn(BearerAuth(apiKey)))
	}
	return NewClientWithResponses(baseURL, append(first, opts...)...)
}

// BearerAuth is a request editor that authenticates with the API key key.
func BearerAuth(key string) RequestEditorFn {
	return func(_ context.Context, req *http.Request) error {
		req.Header.Set("Authorization", "Bearer "+key)
		return nil
	}
}

// Error makes a problem document an error: "422 Validation failed
// (validation_failed): identifier: must match ...". Branch on p.Code, not on
// this text.
func (p *Problem) Error() string {
	msg := fmt.Sprintf("%d %s", p.Status, p.Title)
	if p.Code != "" {
		msg += " (" + string(p.Code) + ")"
	}
	if p.Detail != nil && *p.Detail != "" {
		msg += ": " + *p.Detail
	}
	return msg
}

// Answer is what the answer of every ...WithResponse method has.
type Answer interface {
	StatusCode() int
	ContentType() string
	GetBody() []byte
}

// maxDetail bounds the detail Check makes of an answer that is not a problem
// document (an HTML error page, say).
const maxDetail = 512

// Check is nil for a 2xx answer. Otherwise it is the answer's problem
// document as a *Problem, whose Code says what kind of problem it is
// (ProblemCodeNotFound, ...); or, for an answer that carries none (from a
// proxy in front of the service, say), a *Problem made of the status and
// the body, without a code.
func Check(a Answer) error {
	code := a.StatusCode()
	if code >= 200 && code < 300 {
		return nil
	}
	p := &Problem{Status: code, Title: http.StatusText(code)}
	if strings.HasPrefix(a.ContentType(), "application/problem+json") {
		var doc Problem
		if err := json.Unmarshal(a.GetBody(), &doc); err == nil && doc.Status == code {
			return &doc
		}
	}
	if body := strings.TrimSpace(string(a.GetBody())); body != "" {
		if len(body) > maxDetail {
			body = body[:maxDetail] + "..."
		}
		p.Detail = &body
	}
	return p
}
