package subscriptions

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/roomhub/messaging-api/api"
)

// AuthType says how a push endpoint authenticates the service's requests,
// beside the signature every request carries.
type AuthType string

const (
	AuthBasic   AuthType = "basic"   // Authorization: Basic base64(username:password)
	AuthBearer  AuthType = "bearer"  // Authorization: Bearer token
	AuthHeaders AuthType = "headers" // headers of the subscriber's choosing, e.g. X-Api-Key
)

// ErrNoPushAuthKey is returned by a Store that cannot keep push
// credentials, because the service has no key to encrypt them with.
var ErrNoPushAuthKey = errors.New("cannot be stored: the service has no PUSH_AUTH_KEY to encrypt endpoint credentials with; ask its operator")

// Limits on pushAuth: each request to the endpoint carries it.
const (
	maxAuthUsername    = 256
	maxAuthPassword    = 1024
	maxAuthToken       = 4096
	maxAuthHeaders     = 16
	maxAuthHeaderName  = 128
	maxAuthHeaderBytes = 8 << 10 // names and values together
)

// PushAuth is the credential a PUSH subscription's endpoint asks of each
// request. Password, Token and the Headers' values are secrets: they are
// stored encrypted, sent on every request, and never shown, logged or
// recorded (String and LogValue leave them out; outcomes mask them).
type PushAuth struct {
	Type     AuthType
	Username string            // basic
	Password string            // basic
	Token    string            // bearer
	Headers  map[string]string // headers: name as given → value
}

// HeaderNames are the names of a headers credential, sorted.
func (a *PushAuth) HeaderNames() []string {
	if a == nil {
		return nil
	}
	return slices.Sorted(maps.Keys(a.Headers))
}

// Apply sets the credential's headers on h; a nil PushAuth sets none.
func (a *PushAuth) Apply(h http.Header) {
	if a == nil {
		return
	}
	switch a.Type {
	case AuthBasic:
		h.Set("Authorization", "Basic "+basicCredentials(a.Username, a.Password))
	case AuthBearer:
		h.Set("Authorization", "Bearer "+a.Token)
	case AuthHeaders:
		for name, v := range a.Headers {
			h.Set(name, v)
		}
	}
}

func basicCredentials(user, password string) string {
	return base64.StdEncoding.EncodeToString([]byte(user + ":" + password))
}

// Secrets are the values to mask wherever a request's outcome is recorded
// (an endpoint may echo its request): each secret as sent, the encoded
// basic credentials, and each as a JSON string would quote it.
func (a *PushAuth) Secrets() []string {
	if a == nil {
		return nil
	}
	var out []string
	switch a.Type {
	case AuthBasic:
		out = append(out, a.Password, basicCredentials(a.Username, a.Password), a.Username+":"+a.Password)
	case AuthBearer:
		out = append(out, a.Token)
	case AuthHeaders:
		for _, name := range a.HeaderNames() {
			out = append(out, a.Headers[name])
		}
	}
	for _, s := range out {
		if q, _ := json.Marshal(s); len(q) > 2 && string(q[1:len(q)-1]) != s {
			out = append(out, string(q[1:len(q)-1]))
		}
	}
	return out
}

// String describes the credential without its secrets.
func (a *PushAuth) String() string {
	if a == nil {
		return "none"
	}
	switch a.Type {
	case AuthBasic:
		return fmt.Sprintf("basic (username %q)", a.Username)
	case AuthHeaders:
		return fmt.Sprintf("headers %s", strings.Join(a.HeaderNames(), ", "))
	}
	return string(a.Type)
}

// GoString keeps %#v from printing the secrets.
func (a *PushAuth) GoString() string { return "subscriptions.PushAuth{" + a.String() + "}" }

// LogValue logs the credential without its secrets.
func (a *PushAuth) LogValue() slog.Value { return slog.StringValue(a.String()) }

// ReservedHeader reports whether a pushAuth header may not have this name:
// the dispatcher sets it itself (the content type, the signature, the
// X-Event-* and X-Attr-* headers, trace context), or it is the transport's
// (Host, Content-Length, hop-by-hop headers), so another value would break
// or falsify the delivery.
func ReservedHeader(name string) bool {
	n := strings.ToLower(name)
	switch n {
	case "accept-encoding", "connection", "content-encoding", "content-length", "content-type", "expect", "host",
		"keep-alive", "te", "trailer", "transfer-encoding", "upgrade", "user-agent",
		"traceparent", "tracestate", "x-attempt", "x-correlation-id", "x-subscription-id":
		return true
	}
	for _, prefix := range []string{"webhook-", "x-event-", "x-attr-", "proxy-"} {
		if strings.HasPrefix(n, prefix) {
			return true
		}
	}
	return false
}

// PushAuthInput is pushAuth as a request writes it.
type PushAuthInput struct {
	Type     string            `json:"type"`
	Username *string           `json:"username,omitempty"`
	Password *string           `json:"password,omitempty"`
	Token    *string           `json:"token,omitempty"`
	Headers  map[string]string `json:"headers,omitempty"`
}

// validate returns the credential in, or nil with its problems in probs.
// No message quotes a value: they reach the logs.
func (in PushAuthInput) validate(probs *api.Problems) *PushAuth {
	before := probs.Len()
	add := func(member, msg string) { probs.AddPointer("pushAuth."+member, "/pushAuth/"+member, msg) }
	only := func(member string, set bool, types string) {
		if set {
			add(member, "is only for pushAuth of type "+types)
		}
	}
	a := &PushAuth{Type: AuthType(in.Type)}
	switch a.Type {
	case AuthBasic:
		switch u := deref(in.Username); {
		case in.Username == nil || u == "":
			add("username", "is required for type basic")
		case len(u) > maxAuthUsername:
			add("username", fmt.Sprintf("must be at most %d bytes", maxAuthUsername))
		case strings.Contains(u, ":") || hasControl(u):
			add("username", "must not contain ':' or control characters (RFC 7617)")
		default:
			a.Username = u
		}
		switch pw := deref(in.Password); {
		case in.Password == nil || pw == "":
			add("password", "is required for type basic (put a secret that is the username, such as an API key, in a bearer or headers credential: the username is shown back)")
		case len(pw) > maxAuthPassword:
			add("password", fmt.Sprintf("must be at most %d bytes", maxAuthPassword))
		case hasControl(pw):
			add("password", "must not contain control characters (CR, LF, ...)")
		default:
			a.Password = pw
		}
		only("token", in.Token != nil, "bearer")
		only("headers", in.Headers != nil, "headers")
	case AuthBearer:
		switch tok := deref(in.Token); {
		case in.Token == nil || tok == "":
			add("token", "is required for type bearer")
		case len(tok) > maxAuthToken:
			add("token", fmt.Sprintf("must be at most %d bytes", maxAuthToken))
		case strings.IndexFunc(tok, func(r rune) bool { return r < 0x21 || r > 0x7e }) >= 0:
			add("token", "must be printable ASCII without spaces")
		default:
			a.Token = tok
		}
		only("username", in.Username != nil, "basic")
		only("password", in.Password != nil, "basic")
		only("headers", in.Headers != nil, "headers")
	case AuthHeaders:
		a.Headers = validateAuthHeaders(in.Headers, probs)
		only("username", in.Username != nil, "basic")
		only("password", in.Password != nil, "basic")
		only("token", in.Token != nil, "bearer")
	default:
		add("type", "must be basic, bearer or headers")
	}
	if probs.Len() > before {
		return nil
	}
	return a
}

// validateAuthHeaders checks the headers of a headers credential; each
// problem with one header names it by its JSON pointer.
func validateAuthHeaders(in map[string]string, probs *api.Problems) map[string]string {
	switch {
	case len(in) == 0:
		probs.AddPointer("pushAuth.headers", "/pushAuth/headers", fmt.Sprintf("is required for type headers: 1 to %d headers", maxAuthHeaders))
		return nil
	case len(in) > maxAuthHeaders:
		probs.AddPointer("pushAuth.headers", "/pushAuth/headers", fmt.Sprintf("must name at most %d headers", maxAuthHeaders))
		return nil
	}
	out := make(map[string]string, len(in))
	seen := map[string]bool{}
	total := 0
	for _, name := range slices.Sorted(maps.Keys(in)) {
		v := in[name]
		total += len(name) + len(v)
		ptr := "/pushAuth/headers/" + pointerToken(name)
		bad := func(msg string) { probs.AddPointer("pushAuth.headers", ptr, msg) }
		switch {
		case name == "" || len(name) > maxAuthHeaderName || strings.IndexFunc(name, func(r rune) bool { return !isTokenChar(r) }) >= 0:
			bad(fmt.Sprintf("a header name must be an HTTP token (letters, digits, !#$%%&'*+-.^_`|~) of at most %d characters", maxAuthHeaderName))
		case ReservedHeader(name):
			bad("this header is set by the service or the transport (Content-Type, Host, webhook-*, X-Event-*, X-Attr-*, traceparent, ...) and cannot be a credential")
		case seen[strings.ToLower(name)]:
			bad("names a header given already (header names are case-insensitive)")
		case v == "":
			bad("a header value must not be empty")
		case strings.IndexFunc(v, func(r rune) bool { return (r < 0x20 && r != '\t') || r > 0x7e }) >= 0:
			bad("a header value must be printable ASCII: no CR, LF or other control characters")
		case strings.TrimSpace(v) != v:
			bad("a header value must not begin or end with white space (it would be trimmed on the way)")
		default:
			out[name] = v
		}
		seen[strings.ToLower(name)] = true
	}
	if total > maxAuthHeaderBytes {
		probs.AddPointer("pushAuth.headers", "/pushAuth/headers", fmt.Sprintf("names and values must come to at most %d bytes", maxAuthHeaderBytes))
	}
	return out
}

// isTokenChar reports whether r may be in an HTTP token (RFC 9110 §5.6.2).
func isTokenChar(r rune) bool {
	return r < 0x7f && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("!#$%&'*+-.^_`|~", r))
}

func hasControl(s string) bool {
	return strings.IndexFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0
}

// pointerToken escapes a member name for a JSON pointer (RFC 6901).
func pointerToken(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
