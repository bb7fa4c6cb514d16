package console

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/roomhub/messaging-api/api"
	"github.com/roomhub/messaging-api/auth"
)

// maxAnswer bounds an API answer the console reads: a page asks for at most
// a few dozen items, each at most one payload (PUBLISH_MAX_PAYLOAD).
const maxAnswer = 32 << 20

// apiError is an API answer other than 2xx: its problem document.
type apiError struct {
	api.Problem
}

func (e *apiError) Error() string {
	return fmt.Sprintf("%d %s: %s", e.Status, e.Title, e.Detail)
}

// problemOf is the API's refusal err carries, nil when it carries none.
func problemOf(err error) *apiError {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	return nil
}

// client calls the API's routes in-process for one console request, as its
// session's key.
type client struct {
	api       http.Handler
	ctx       context.Context
	keyID     uuid.UUID // uuid.Nil: no key (authentication is off)
	remote    string
	requestID string
	// bearer, when set, authenticates with a token instead (sign-in).
	bearer string
}

// newClient is a client for the request c, made as the key keyID.
func (cn *Console) newClient(c echo.Context, keyID uuid.UUID) *client {
	return &client{
		api: cn.api, ctx: c.Request().Context(), keyID: keyID, remote: c.Request().RemoteAddr,
		requestID: c.Response().Header().Get(echo.HeaderXRequestID),
	}
}

// request builds the in-process request: the session's key id (never a
// token) in its context, so the key middleware authenticates it.
func (cl *client) request(ctx context.Context, method, path string, body []byte, header http.Header) *http.Request {
	if cl.keyID != uuid.Nil {
		ctx = auth.WithSessionKey(ctx, cl.keyID)
	}
	req, _ := http.NewRequestWithContext(ctx, method, path, bytes.NewReader(body))
	req.RemoteAddr = cl.remote
	req.Header.Set(echo.HeaderAccept, echo.MIMEApplicationJSON)
	if body != nil {
		req.Header.Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
	}
	if cl.requestID != "" {
		req.Header.Set(echo.HeaderXRequestID, cl.requestID)
	}
	if cl.bearer != "" {
		req.Header.Set(echo.HeaderAuthorization, "Bearer "+cl.bearer)
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	return req
}

// do sends method path with body (nil, raw JSON bytes, or a value encoded as
// JSON) and decodes a 2xx answer into out (when not nil); any other answer
// is an *apiError with the API's problem document.
func (cl *client) do(method, path string, body any, out any) error {
	return cl.doHeader(method, path, body, nil, out)
}

func (cl *client) doHeader(method, path string, body any, header http.Header, out any) error {
	var raw []byte
	switch b := body.(type) {
	case nil:
	case []byte:
		raw = b
	default:
		var err error
		if raw, err = json.Marshal(b); err != nil {
			return err
		}
	}
	rec := newRecorder()
	cl.api.ServeHTTP(rec, cl.request(cl.ctx, method, path, raw, header))
	if rec.overflow {
		return fmt.Errorf("%s %s: the answer exceeds %d bytes", method, path, maxAnswer)
	}
	if rec.status < 200 || rec.status > 299 {
		p := api.Problem{Status: rec.status, Title: http.StatusText(rec.status)}
		if err := json.Unmarshal(rec.body.Bytes(), &p); err != nil || p.Status == 0 {
			p = api.Problem{Status: rec.status, Title: http.StatusText(rec.status), Detail: strings.TrimSpace(rec.body.String())}
		}
		return &apiError{Problem: p}
	}
	if out == nil || rec.status == http.StatusNoContent {
		return nil
	}
	if err := json.Unmarshal(rec.body.Bytes(), out); err != nil {
		return fmt.Errorf("%s %s: decode the answer: %w", method, path, err)
	}
	return nil
}

// may asks whether the key may use the route of method and path: the
// route's own rule answers (auth.WithProbe), and no handler runs.
func (cl *client) may(method, path string) bool {
	rec := newRecorder()
	cl.api.ServeHTTP(rec, cl.request(auth.WithProbe(cl.ctx), method, path, nil, nil))
	return rec.status == http.StatusNoContent
}

// recorder is the in-process answer: headers, status, and a body bounded
// by maxAnswer.
type recorder struct {
	header   http.Header
	status   int
	body     bytes.Buffer
	overflow bool
}

func newRecorder() *recorder { return &recorder{header: http.Header{}} }

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
}

func (r *recorder) Write(p []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	if r.body.Len()+len(p) > maxAnswer {
		r.overflow = true
		return 0, io.ErrShortWrite
	}
	return r.body.Write(p)
}

// path joins escaped path segments under /v1.
func path(segments ...string) string {
	var b strings.Builder
	b.WriteString("/v1")
	for _, s := range segments {
		b.WriteByte('/')
		b.WriteString(url.PathEscape(s))
	}
	return b.String()
}
