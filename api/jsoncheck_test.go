package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestCheckJSON(t *testing.T) {
	t.Parallel()
	many := func(dup string) string {
		var b strings.Builder
		b.WriteString(`{"p":{`)
		for i := range 40 {
			fmt.Fprintf(&b, `"k%d":%d,`, i, i)
		}
		b.WriteString(`"` + dup + `":0}}`)
		return b.String()
	}
	cases := []struct {
		name, body     string
		field, pointer string // "" when accepted
	}{
		{"object", `{"a":1,"b":{"a":2},"c":[{"a":3},{"a":4}]}`, "", ""},
		{"scalars", `[1,-2.5e3,true,false,null,"x",{},[]]`, "", ""},
		{"top-level twice", `{"identifier":"a","identifier":"b"}`, "identifier", "/identifier"},
		{"nested twice", `{"messages":[{"payload":{"x":1}},{"payload":{"y":1,"x":[],"y":2}}]}`, "messages[1].payload.y", "/messages/1/payload/y"},
		{"escaped twice", `{"a":1,"\u0061":2}`, "a", "/a"},
		{"both escaped", `{"\u00e9":1,"\u00E9":2}`, "é", "/é"},
		{"twice past the small set", many("k7"), "p.k7", "/p/k7"},
		{"many once", many("k40"), "", ""},
		{"pointer escapes", `{"a/b":{"~":1,"~":2}}`, "a/b.~", "/a~1b/~0"},
		{"array of arrays", `[[1],[{"a":1,"a":1}]]`, "body[1][0].a", "/1/0/a"},
		{"empty name twice", `{"":1,"":2}`, "body", "/"},
		{"invalid UTF-8 value", "{\"payload\":{\"s\":\"a\xffb\"}}", "payload.s", "/payload/s"},
		{"invalid UTF-8 in an array", "[1,\"\xc3\"]", "body[1]", "/1"},
		{"invalid UTF-8 top level", "\"\xed\xa0\x80\"", "body", ""},
		{"invalid UTF-8 name", "{\"p\":{\"\xff\":1}}", "p", "/p"},
		{"valid UTF-8", `{"s":"é€😀 \u00e9 \ud83d\ude00"}`, "", ""},
		{"malformed is the decoder's", `{"a":1,"b"`, "", ""},
		{"unclosed", `[[[[`, "", ""},
		{"garbage", `{"a":1}}}}`, "", ""},
		{"missing colon", `{"a" 1,"a":2}`, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ve := checkJSON([]byte(tc.body))
			if tc.field == "" {
				if ve != nil {
					t.Fatalf("refused: %v", ve)
				}
				return
			}
			if ve == nil || len(ve.Fields) != 1 {
				t.Fatalf("got %v, want a refusal of %s", ve, tc.field)
			}
			if f := ve.Fields[0]; f.Field != tc.field || f.Pointer != tc.pointer || f.Message == "" || ve.Status != 0 {
				t.Errorf("got %+v (status %d), want field %q pointer %q (422)", f, ve.Status, tc.field, tc.pointer)
			}
		})
	}
}

// TestCheckJSONDeep: nesting far beyond what the decoder takes costs no stack.
func TestCheckJSONDeep(t *testing.T) {
	t.Parallel()
	deep := strings.Repeat(`{"a":[`, 200_000) + "1" + strings.Repeat("]}", 200_000)
	if ve := checkJSON([]byte(deep)); ve != nil {
		t.Fatal(ve)
	}
	dup := strings.Repeat(`[`, 200_000) + `{"a":1,"a":2}` + strings.Repeat("]", 200_000)
	if ve := checkJSON([]byte(dup)); ve == nil || !strings.HasSuffix(ve.Fields[0].Field, "[0].a") {
		t.Fatalf("got %v", ve)
	}
}

func TestDecodeRefusesNUL(t *testing.T) {
	t.Parallel()
	type item struct {
		Name string `json:"name"`
	}
	type request struct {
		Identifier Nullable[string]             `json:"identifier"`
		Items      Nullable[[]item]             `json:"items"`
		Owner      *string                      `json:"owner"`
		Attributes map[string]string            `json:"attributes"`
		Payload    json.RawMessage              `json:"payload"`
		Schema     json.RawMessage              `json:"schema"`
		Inner      struct{ Description string } `json:"inner"`
	}
	cases := []struct{ body, field string }{
		{`{"identifier":"a\u0000b"}`, "identifier"},
		{`{"items":[{"name":"x"},{"name":"\u0000"}]}`, "items[1].name"},
		{`{"owner":"\u0000"}`, "owner"},
		{`{"attributes":{"k":"v\u0000"}}`, "attributes.k"},
		{`{"attributes":{"k\u0000":"v"}}`, "attributes"},
		{`{"inner":{"Description":"\u0000"}}`, "inner.Description"},
		{`{"payload":{"s":"\u0000"},"schema":{"const":"\u0000"},"identifier":"\\u0000"}`, ""},
	}
	for _, tc := range cases {
		var req request
		err := DecodeBytes([]byte(tc.body), &req)
		if tc.field == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.body, err)
			}
			continue
		}
		var ve *ValidationError
		if !errors.As(err, &ve) || ve.Fields[0].Field != tc.field || ve.Status != 0 {
			t.Errorf("%s: got %v, want a 422 naming %s", tc.body, err, tc.field)
		}
	}
}

var checkJSONSeeds = []string{
	`{"a":1,"b":[1,2,{"a":1}]}`,
	`{"a":1,"a":2}`,
	`{"a":1,"\u0061":2}`,
	`{"a":{"b":1,"b":1}}`,
	`[{"a":1},{"a":1}]`,
	"{\"s\":\"\xff\"}",
	"{\"\xc3\":1}",
	`{"\ud800":1,"\udc00":2}`,
	`{"a":"\u0000","b":"\\","c":"\"\""}`,
	`{"a":1,"a"`,
	`[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]`,
	`  {"x" : [ 1 , {"y":true ,"y" : false} ] }  `,
}

// FuzzCheckJSON: checkJSON never panics, names a field in each refusal, and
// on valid JSON refuses exactly the bodies that repeat a member name in one
// object or are not UTF-8 (a reference built on encoding/json's tokens).
func FuzzCheckJSON(f *testing.F) {
	for _, s := range checkJSONSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		ve := checkJSON(body)
		if ve != nil && (len(ve.Fields) != 1 || ve.Fields[0].Field == "" || ve.Fields[0].Message == "") {
			t.Fatalf("refusal %+v names no field", ve)
		}
		if !json.Valid(body) {
			return
		}
		want := !utf8.Valid(body) || repeatsName(t, body)
		if (ve != nil) != want {
			t.Fatalf("checkJSON(%q) = %v, want a refusal: %v", body, ve, want)
		}
	})
}

// repeatsName reports whether an object of body (valid JSON) has a member
// name twice.
func repeatsName(t *testing.T, body []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	type frame struct {
		object, wantName bool
		names            map[string]bool
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return false
		}
		if err != nil {
			t.Fatalf("tokens of valid JSON %q: %v", body, err)
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.object && top.wantName {
			if d, ok := tok.(json.Delim); !ok || d != '}' {
				name := tok.(string)
				if top.names[name] {
					return true
				}
				top.names[name] = true
				top.wantName = false
				continue
			}
		}
		if top != nil && top.object {
			top.wantName = true
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{object: true, wantName: true, names: map[string]bool{}})
		case json.Delim('['):
			stack = append(stack, &frame{})
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
			if len(stack) > 0 && stack[len(stack)-1].object {
				stack[len(stack)-1].wantName = true
			}
		}
	}
}
