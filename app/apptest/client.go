package apptest

import (
	"bytes"
	"io"
	"net/http"
	"testing"

	"github.com/roomhub/messaging-api/client"
)

// The generated Go client (package client) in tests: every answer it gets
// is checked against openapi.yaml, as API.Do checks its answers, so a test
// that acts as a client through it tests the client, the service and the
// spec together.

// API is the generated client of the service c runs, as c's API key (if
// any).
func (c Client) API() *client.ClientWithResponses {
	c.T.Helper()
	return newClient(c.T, c.Base, c.Token)
}

// Client is the generated client of the API (authentication is off unless
// the test's configuration turned it on).
func (a *API) Client() *client.ClientWithResponses {
	a.T.Helper()
	return newClient(a.T, a.URL, "")
}

func newClient(t testing.TB, base, token string) *client.ClientWithResponses {
	t.Helper()
	c, err := client.New(base, token, client.WithHTTPClient(specDoer{t: t}))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// specDoer sends requests with http.DefaultClient and fails t (without
// stopping it: it may run on another goroutine) on an answer that is not
// what openapi.yaml says the route answers.
type specDoer struct{ t testing.TB }

func (d specDoer) Do(req *http.Request) (*http.Response, error) {
	var reqBody []byte
	if req.GetBody != nil {
		b, err := req.GetBody()
		if err != nil {
			return nil, err
		}
		if reqBody, err = io.ReadAll(b); err != nil {
			return nil, err
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if err := CheckSpec(req.Method, req.URL.RequestURI(), reqBody, Response{Status: resp.StatusCode, Header: resp.Header, Body: body}); err != nil {
		d.t.Error(err)
	}
	return resp, nil
}

// Must fails t unless the call succeeded (err is nil) with the answer whose
// body the generated client decoded into v (resp.JSON201 for a create, say),
// and returns v.
func Must[T any](t testing.TB, resp client.Answer, err error, v *T) *T {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	if v == nil {
		t.Fatalf("answer %d: %s", resp.StatusCode(), resp.GetBody())
	}
	return v
}
