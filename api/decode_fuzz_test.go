package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"testing"
)

// fuzzItem and fuzzRequest have the field shapes the request DTOs use:
// Nullable scalars, slices and objects, plain pointers, maps and raw JSON.
type fuzzItem struct {
	Name     string `json:"name"`
	Versions []int  `json:"versions"`
}

type fuzzRequest struct {
	Identifier Nullable[string]     `json:"identifier"`
	Delay      Nullable[int64]      `json:"delay"`
	Attempts   Nullable[int]        `json:"attempts"`
	Jitter     Nullable[float64]    `json:"jitter"`
	Enabled    Nullable[bool]       `json:"enabled"`
	Items      Nullable[[]fuzzItem] `json:"items"`
	Item       Nullable[fuzzItem]   `json:"item"`
	Grace      *int64               `json:"grace"`
	Attributes map[string]string    `json:"attributes,omitempty"`
	Payload    json.RawMessage      `json:"payload,omitempty"`
	List       []fuzzItem           `json:"list,omitempty"`
}

var decodeSeeds = []string{
	`{}`,
	`null`,
	`{"identifier":"orders","delay":1000,"attempts":3,"jitter":0.5,"enabled":true}`,
	`{"identifier":null,"delay":null,"items":null,"item":null}`,
	`{"items":[{"name":"a","versions":[1,2]}],"item":{"name":"b"}}`,
	`{"items":[{"name":"a","versoins":[1]}]}`,
	`{"item":{"name":"a","extra":1}}`,
	`{"identifer":"typo"}`, //nolint:misspell // a deliberate typo: an unknown field
	`{"delay":"1000"}`,
	`{"delay":1e400}`,
	`{"delay":9223372036854775808}`,
	`{"attempts":1.5}`,
	`{"jitter":"NaN"}`,
	`{"jitter":-0}`,
	`{"identifier":"a","identifier":"b"}`,
	`{"identifier":"\u0000\ud800\u2028"}`,
	`{"payload":[[[[[[[[[[[[[[[[[[[[{}]]]]]]]]]]]]]]]]]]]}`,
	`{"attributes":{"a":"x","a":"y"}}`,
	`{} {}`,
	`{}garbage`,
	`{"delay":`,
	`[]`,
	`"string"`,
	`   `,
	"\xff\xfe{}",
}

// FuzzDecodeBytes: strict decoding never panics; an error is always a
// ValidationError (400 or 422) naming a field; a decoded value re-encodes and
// decodes to itself.
func FuzzDecodeBytes(f *testing.F) {
	for _, s := range decodeSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var req fuzzRequest
		err := DecodeBytes(body, &req)
		if err != nil {
			checkValidationError(t, err)
			return
		}
		if !json.Valid(bytes.TrimSpace(body)) {
			t.Fatalf("accepted invalid JSON %q", body)
		}
		again := reencode(t, req)
		var req2 fuzzRequest
		if err := DecodeBytes(again, &req2); err != nil {
			t.Fatalf("re-encoded %s does not decode: %v", again, err)
		}
		req.Payload, req2.Payload = compactRaw(req.Payload), compactRaw(req2.Payload)
		if !reflect.DeepEqual(req, req2) {
			t.Fatalf("round trip changed the value:\n%#v\n%#v", req, req2)
		}
	})
}

// checkValidationError asserts what the error handler needs of a decode error.
func checkValidationError(t *testing.T, err error) {
	t.Helper()
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("error %v (%T) is not a ValidationError", err, err)
	}
	if ve.Status != 0 && ve.Status != http.StatusBadRequest {
		t.Fatalf("status %d, want 0 (422) or 400", ve.Status)
	}
	if len(ve.Fields) == 0 {
		t.Fatalf("validation error %v names no field", err)
	}
	for _, fe := range ve.Fields {
		if fe.Field == "" || fe.Message == "" {
			t.Fatalf("field error %+v has no field or no message", fe)
		}
	}
	if p := toProblem(err); p.Status >= 500 {
		t.Fatalf("decode error %v maps to %d", err, p.Status)
	}
}

// reencode writes req back as JSON the way a client would send it: absent
// Nullable fields left out, null ones as null.
func reencode(t *testing.T, req fuzzRequest) []byte {
	t.Helper()
	m := map[string]any{}
	put := func(name string, set, null bool, v any) {
		switch {
		case !set:
		case null:
			m[name] = nil
		default:
			m[name] = v
		}
	}
	put("identifier", req.Identifier.Set, req.Identifier.Null, req.Identifier.Value)
	put("delay", req.Delay.Set, req.Delay.Null, req.Delay.Value)
	put("attempts", req.Attempts.Set, req.Attempts.Null, req.Attempts.Value)
	put("jitter", req.Jitter.Set, req.Jitter.Null, req.Jitter.Value)
	put("enabled", req.Enabled.Set, req.Enabled.Null, req.Enabled.Value)
	put("items", req.Items.Set, req.Items.Null, req.Items.Value)
	put("item", req.Item.Set, req.Item.Null, req.Item.Value)
	if req.Grace != nil {
		m["grace"] = *req.Grace
	}
	if req.Attributes != nil {
		m["attributes"] = req.Attributes
	}
	if req.Payload != nil {
		m["payload"] = req.Payload
	}
	if req.List != nil {
		m["list"] = req.List
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatalf("decoded value does not re-encode: %v", err)
	}
	return b
}

func compactRaw(raw json.RawMessage) json.RawMessage {
	if raw == nil {
		return nil
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return raw
	}
	return buf.Bytes()
}

// FuzzNullable: a present field is Set; Null exactly for null; Ptr is nil
// exactly then; the value re-encodes to something that decodes to itself.
func FuzzNullable(f *testing.F) {
	for _, s := range []string{`null`, `0`, `-1`, `1e3`, `1.5`, `"x"`, `"null"`, `true`, `[]`, `[1,2]`, `{}`,
		`{"name":"a"}`, `{"name":"a","x":1}`, `9223372036854775807`, `9223372036854775808`, `1e400`, `[[1]]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if !json.Valid(b) {
			return // the outer decoder refuses these before a field sees them
		}
		checkNullable[int64](t, b)
		checkNullable[int](t, b)
		checkNullable[float64](t, b)
		checkNullable[string](t, b)
		checkNullable[bool](t, b)
		checkNullable[[]int](t, b)
		checkNullable[fuzzItem](t, b)
	})
}

func checkNullable[T any](t *testing.T, b []byte) {
	t.Helper()
	var n Nullable[T]
	err := json.Unmarshal(b, &n)
	if !n.Set {
		t.Fatalf("%T: Set is false after %q", n, b)
	}
	null := string(bytes.TrimSpace(b)) == "null"
	if err != nil {
		if null {
			t.Fatalf("%T: null refused: %v", n, err)
		}
		return
	}
	if n.Null != null {
		t.Fatalf("%T: Null = %v for %q", n, n.Null, b)
	}
	if (n.Ptr() == nil) != null {
		t.Fatalf("%T: Ptr() = %v for %q", n, n.Ptr(), b)
	}
	if null {
		return
	}
	again, err := json.Marshal(n.Value)
	if err != nil {
		t.Fatalf("%T: value of %q does not re-encode: %v", n, b, err)
	}
	var n2 Nullable[T]
	if err := json.Unmarshal(again, &n2); err != nil {
		t.Fatalf("%T: re-encoded %s does not decode: %v", n, again, err)
	}
	if !reflect.DeepEqual(n, n2) {
		t.Fatalf("%T: round trip %q -> %s changed %#v to %#v", n, b, again, n, n2)
	}
}
