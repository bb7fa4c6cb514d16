package api

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"
)

// Decode reads the JSON request body into v strictly: unknown fields, wrong
// types, trailing data, a member name given twice, text that is not UTF-8 and
// a NUL character in a text field are errors that name the field, so a typo
// in a field name is reported rather than silently ignored. A body that is not
// declared JSON gets 415 (see readBody).
func Decode(c echo.Context, v any) error {
	body, err := readBody(c)
	if err != nil {
		return err
	}
	return DecodeBytes(body, v)
}

// DecodeOptional is Decode for a body that may be left out: an empty body
// leaves v as it is.
func DecodeOptional(c echo.Context, v any) error {
	body, err := readBody(c)
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	return DecodeBytes(body, v)
}

// readBody reads the request body. One that is not empty (whitespace counts
// as empty) must be declared JSON: Content-Type application/json or
// application/*+json, with any parameters but a charset other than UTF-8;
// anything else, a missing Content-Type included, gets 415. An empty body
// needs no Content-Type, so that operations whose body is optional may be
// called without one.
func readBody(c echo.Context) ([]byte, error) {
	body, err := io.ReadAll(c.Request().Body)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, echo.NewHTTPError(http.StatusRequestEntityTooLarge,
				fmt.Sprintf("request body exceeds %d bytes", tooBig.Limit))
		}
		return nil, fmt.Errorf("read request body: %w", err)
	}
	if len(bytes.TrimSpace(body)) > 0 {
		if err := checkContentType(c.Request().Header.Get(echo.HeaderContentType)); err != nil {
			return nil, err
		}
	}
	return body, nil
}

// checkContentType refuses a request body declared as anything but JSON.
func checkContentType(ct string) error {
	if ct == "" {
		return echo.NewHTTPError(http.StatusUnsupportedMediaType,
			"the request has a body but no Content-Type: send it as application/json")
	}
	mt, params, err := mime.ParseMediaType(ct)
	switch {
	case err != nil:
		return echo.NewHTTPError(http.StatusUnsupportedMediaType,
			fmt.Sprintf("Content-Type %q is not a media type: send application/json", ct))
	case mt != "application/json" && (!strings.HasPrefix(mt, "application/") || !strings.HasSuffix(mt, "+json")):
		return echo.NewHTTPError(http.StatusUnsupportedMediaType,
			fmt.Sprintf("Content-Type %q is not JSON: send application/json", mt))
	case params["charset"] != "" && !strings.EqualFold(params["charset"], "utf-8"):
		return echo.NewHTTPError(http.StatusUnsupportedMediaType,
			fmt.Sprintf("charset %q is not UTF-8: JSON is sent as UTF-8", params["charset"]))
	}
	return nil
}

// DecodeBytes is Decode for a body already read.
func DecodeBytes(body []byte, v any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return &ValidationError{Status: http.StatusBadRequest, Fields: []FieldError{{Field: "body", Message: "a JSON object is required"}}}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeError(err)
	}
	if dec.More() {
		return &ValidationError{Status: http.StatusBadRequest, Fields: []FieldError{{Field: "body", Message: "unexpected data after the JSON value"}}}
	}
	if _, err := dec.Token(); err != io.EOF {
		return &ValidationError{Status: http.StatusBadRequest, Fields: []FieldError{{Field: "body", Message: "unexpected data after the JSON value"}}}
	}
	// After the decoder, so that a malformed body is reported as such.
	if ve := checkJSON(body); ve != nil {
		return ve
	}
	if mayHoldNUL(body) {
		if ve := checkText(v); ve != nil {
			return ve
		}
	}
	return nil
}

var unknownField = regexp.MustCompile(`^json: unknown field "(.*)"$`)

func decodeError(err error) error {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	var field *FieldError
	switch {
	case errors.As(err, &field):
		return &ValidationError{Fields: []FieldError{*field}}
	case errors.As(err, &syntax):
		return &ValidationError{Status: http.StatusBadRequest, Fields: []FieldError{{
			Field: "body", Message: fmt.Sprintf("malformed JSON at byte %d: %s", syntax.Offset, syntax.Error()),
		}}}
	case errors.Is(err, io.ErrUnexpectedEOF):
		return &ValidationError{Status: http.StatusBadRequest, Fields: []FieldError{{Field: "body", Message: "malformed JSON: unexpected end"}}}
	case errors.As(err, &typ):
		name := fieldPath(typ.Field)
		if name == "" {
			name = "body"
		}
		return &ValidationError{Fields: []FieldError{{Field: name, Message: "must be " + jsonKind(typ.Type.Kind().String(), typ.Value)}}}
	}
	if m := unknownField.FindStringSubmatch(err.Error()); m != nil {
		if m[1] == "" { // the key "": name the body rather than no field
			return &ValidationError{Fields: []FieldError{{Field: "body", Message: `has an unknown field ""`}}}
		}
		return &ValidationError{Fields: []FieldError{{Field: m[1], Message: "unknown field"}}}
	}
	return &ValidationError{Status: http.StatusBadRequest, Fields: []FieldError{{Field: "body", Message: err.Error()}}}
}

// fieldPath turns encoding/json's "eventTypes.0.versions" into "eventTypes[0].versions".
func fieldPath(p string) string {
	parts := strings.Split(p, ".")
	var b strings.Builder
	for _, part := range parts {
		if _, err := strconv.Atoi(part); err == nil && b.Len() > 0 {
			b.WriteString("[" + part + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(part)
	}
	return b.String()
}

func jsonKind(goKind, got string) string {
	want := map[string]string{
		"string": "a string", "bool": "a boolean", "slice": "an array", "array": "an array",
		"map": "an object", "struct": "an object",
		"int": "an integer", "int8": "an integer", "int16": "an integer", "int32": "an integer", "int64": "an integer",
		"uint": "a non-negative integer", "uint8": "a non-negative integer", "uint16": "a non-negative integer",
		"uint32": "a non-negative integer", "uint64": "a non-negative integer",
		"float32": "a number", "float64": "a number",
	}[goKind]
	if want == "" {
		want = "of another type"
	}
	if got != "" {
		return want + ", not " + got
	}
	return want
}

// Error lets a FieldError travel through encoding/json from a custom
// UnmarshalJSON and come out naming its field.
func (f *FieldError) Error() string { return f.Field + ": " + f.Message }

// Nullable is a request field that distinguishes absent (Set false), null
// (Null true) and a value, as a JSON merge patch needs.
type Nullable[T any] struct {
	Set   bool
	Null  bool
	Value T
}

// UnmarshalJSON records that the field was present.
func (n *Nullable[T]) UnmarshalJSON(b []byte) error {
	*n = Nullable[T]{Set: true} // a repeated key: the last one counts, null or not
	if string(b) == "null" {
		n.Null = true
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields() // as Decode does for the rest of the body
	return dec.Decode(&n.Value)
}

// Ptr returns nil for absent or null, else a pointer to the value.
func (n Nullable[T]) Ptr() *T {
	if !n.Set || n.Null {
		return nil
	}
	v := n.Value
	return &v
}

// EncodeCursor makes an opaque page cursor from the sort key of the last item.
func EncodeCursor(key string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(key))
}

// DecodeCursor reverses EncodeCursor; "" means the first page.
func DecodeCursor(cursor string) (string, error) {
	if cursor == "" {
		return "", nil
	}
	b, err := base64.RawURLEncoding.DecodeString(cursor)
	// Every cursor this API makes holds an identifier or an id: printable
	// text, which is what a database text column can compare.
	if err != nil || len(b) == 0 || !utf8.Valid(b) || bytes.IndexByte(b, 0) >= 0 {
		return "", Invalid("cursor", "is not a cursor this API returned")
	}
	return string(b), nil
}

// Page is the query of a list request.
type Page struct {
	Limit int
	After string // sort key to start after; "" for the first page
}

// AfterID is the page's cursor as the id of the last item seen (uuid.Nil for
// the first page), for lists ordered by time-ordered ids.
func (p Page) AfterID() (uuid.UUID, error) {
	if p.After == "" {
		return uuid.Nil, nil
	}
	id, err := uuid.Parse(p.After)
	if err != nil {
		return uuid.Nil, Invalid("cursor", "is not a cursor this API returned")
	}
	return id, nil
}

// ParsePage reads ?limit= (1..max, default def) and ?cursor=.
func ParsePage(c echo.Context, def, max int) (Page, error) {
	var p Problems
	page := Page{Limit: def}
	if s := c.QueryParam("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > max {
			p.Add("limit", fmt.Sprintf("must be an integer from 1 to %d", max))
		}
		page.Limit = n
	}
	after, err := DecodeCursor(c.QueryParam("cursor"))
	if err != nil {
		p.Add("cursor", "is not a cursor this API returned")
	}
	page.After = after
	return page, p.Err()
}

// List is the shape of every list response.
type List[T any] struct {
	Items      []T    `json:"items"`
	NextCursor string `json:"nextCursor,omitempty"`
}
