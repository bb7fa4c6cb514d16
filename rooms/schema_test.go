package rooms_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/roomhub/messaging-api/rooms"
)

// nested wraps inner in n objects {"items": ...}: the innermost value is at
// depth n.
func nested(n int, inner string) string {
	return strings.Repeat(`{"items":`, n) + inner + strings.Repeat(`}`, n)
}

// list joins n copies of elem, each with %d replaced by its index.
func list(n int, elem string) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = strings.ReplaceAll(elem, "%d", strconv.Itoa(i))
	}
	return strings.Join(parts, ",")
}

// refChain is a schema whose root follows n references one after another.
func refChain(n int) string {
	defs := make([]string, n)
	for i := range defs {
		next := `{"$ref":"#/$defs/d` + strconv.Itoa(i+1) + `"}`
		if i == n-1 {
			next = `{"type":"string"}`
		}
		defs[i] = `"d` + strconv.Itoa(i) + `":` + next
	}
	return `{"$defs":{` + strings.Join(defs, ",") + `},"$ref":"#/$defs/d0"}`
}

// fanOut is a schema where every anyOf has two branches, each a reference
// to the next level, levels deep: a value is checked against
// 3·2^levels - 2 subschemas.
func fanOut(levels int) string {
	defs := make([]string, levels)
	for i := range defs {
		ref := `{"$ref":"#/$defs/l` + strconv.Itoa(i+1) + `"}`
		if i == levels-1 {
			ref = `{"type":"string"}`
		}
		defs[i] = `"l` + strconv.Itoa(i) + `":{"anyOf":[` + ref + `,` + ref + `]}`
	}
	return `{"$defs":{` + strings.Join(defs, ",") + `},"$ref":"#/$defs/l0"}`
}

// worstSchema is within every limit, and as costly to compile as they allow:
// the most subschemas, regular expressions with the most instructions and
// character class ranges, references, and the deepest nesting.
func worstSchema() string {
	props := `"big":{"pattern":"^[\\pL\\pN]{660}$"},` + list(6, `"p%d":{"pattern":"^[a-z]{995}$"}`) + "," +
		list(rooms.MaxSubschemas-7-400-40, `"q%d":{"type":"string","minLength":1}`) + "," +
		list(200, `"r%d":{"$ref":"#/$defs/d"}`)
	return `{"$defs":{"d":{"type":"object","properties":{` + list(199, `"x%d":{"type":"integer"}`) + `}}},` +
		`"properties":{` + props + `,"deep":` + nested(30, `{"type":"string"}`) + `}}`
}

func TestSchemaLimitsRefuse(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		schema  string
		pointer string // "" and prefix: the pointer must start with it
		prefix  bool
		message string
	}{
		{"size", `{"description":"` + strings.Repeat("x", rooms.MaxSchemaSize) + `"}`, "", false, "262144"},
		{"9000 levels deep", nested(9000, `{}`), strings.Repeat("/items", 64), false, "nests more than 64 levels"},
		{"65 levels deep", nested(64, `{}`), strings.Repeat("/items", 64), false, "nests more than 64 levels"},
		{"deep data", `{"const":` + strings.Repeat("[", 64) + strings.Repeat("]", 64) + `}`, "/const" + strings.Repeat("/0", 63), false, "64 levels"},
		{"values", `{"enum":[` + list(rooms.MaxSchemaValues-1, "0") + `]}`, "/enum/19998", false, "20000 JSON values"},
		{"subschemas", `{"properties":{` + list(rooms.MaxSubschemas, `"p%d":true`) + `}}`, "/properties/", true, "5000 subschemas"},
		{"refs", `{"$defs":{"a":true},"allOf":[` + list(rooms.MaxSchemaRefs+1, `{"$ref":"#/$defs/a"}`) + `]}`, "/allOf/1000/$ref", false, "1000 references"},
		{"ref chain", refChain(rooms.MaxSchemaRefChain + 1), "", false, "chain of 33 references"},
		{"ref loop", `{"$defs":{"a":{"allOf":[{"$ref":"#/$defs/b"}]},"b":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"}`, "/$defs/", true, "refers back to itself"},
		{"patterns", `{"properties":{` + list(rooms.MaxSchemaPatterns+1, `"p%d":{"pattern":"a"}`) + `}}`, "/properties/", true, "256 regular expressions"},
		{"pattern names", `{"patternProperties":{` + list(rooms.MaxSchemaPatterns+1, `"^p%d$":true`) + `}}`, "/patternProperties/", true, "256 regular expressions"},
		{"pattern length", `{"pattern":"` + strings.Repeat("a", rooms.MaxPatternLength+1) + `"}`, "/pattern", false, "1024"},
		{"pattern program", `{"properties":{"a":{"pattern":"[a-z]{1000}x"}}}`, "/properties/a/pattern", false, "1000 are allowed"},
		{"pattern name program", `{"patternProperties":{"^[a-z]{1000}x$":true}}`, "/patternProperties/^[a-z]{1000}x$", false, "1000 are allowed"},
		{"pattern programs in all", `{"properties":{` + list(11, `"p%d":{"pattern":"[a-z]{998}"}`) + `}}`, "/properties/p9/pattern", false, "more than 10000 instructions in all"},
		{"pattern ranges in all", `{"properties":{"a":{"pattern":"^[\\pL\\pN]{500}$"},"b":{"pattern":"[\\pL\\pN]{200}"}}}`, "/properties/b/pattern", false, "more than 500000 ranges in all"},
		{"number exponent", `{"minimum":1e999999}`, "/minimum", false, "exponent beyond ±400"},
		{"number length", `{"enum":[1` + strings.Repeat("0", rooms.MaxNumberLength) + `]}`, "/enum/0", false, "101 characters"},
		{"checks per value", fanOut(10), "", false, "at depth 0 could be checked against 3070 subschemas"},
		{"checks grow with depth", `{"$defs":{"n":{"allOf":[{"items":{"$ref":"#/$defs/n"}},{"items":{"$ref":"#/$defs/n"}}]}},"$ref":"#/$defs/n"}`, "", false, "at depth 8 could be checked against 1024 subschemas"},
		{"remote ref", `{"$ref":"https://example.com/s.json"}`, "", false, "self-contained"},
		{"not a schema", `[1]`, "", false, "an object or a boolean"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			_, err := rooms.CompileSchema(context.Background(), []byte(tc.schema))
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("refused after %v", d)
			}
			var refused *rooms.PointerError
			if !errors.As(err, &refused) {
				t.Fatalf("error %v, want a *rooms.PointerError", err)
			}
			if tc.prefix && !strings.HasPrefix(refused.Pointer, tc.pointer) || !tc.prefix && refused.Pointer != tc.pointer {
				t.Errorf("pointer %q, want %q (prefix %v)", refused.Pointer, tc.pointer, tc.prefix)
			}
			if !strings.Contains(refused.Message, tc.message) {
				t.Errorf("message %q does not say %q", refused.Message, tc.message)
			}
		})
	}
}

func TestSchemaAtLimitsCompiles(t *testing.T) {
	t.Parallel()
	cases := []struct{ name, schema string }{
		{"64 levels deep", nested(63, `{}`)},
		{"values", `{"enum":[` + list(rooms.MaxSchemaValues-2, "0") + `]}`},
		{"subschemas", `{"properties":{` + list(rooms.MaxSubschemas-1, `"p%d":true`) + `}}`},
		{"refs", `{"$defs":{"a":true},"properties":{` + list(rooms.MaxSchemaRefs, `"p%d":{"$ref":"#/$defs/a"}`) + `}}`},
		{"ref chain", refChain(rooms.MaxSchemaRefChain)},
		{"patterns", `{"properties":{` + list(rooms.MaxSchemaPatterns, `"p%d":{"pattern":"^[a-z]{35}$"}`) + `}}`},
		{"pattern programs", `{"properties":{` + list(10, `"p%d":{"pattern":"[a-z]{998}"}`) + `}}`},
		{"pattern ranges", `{"patternProperties":{"^[\\pL\\pN]{660}$":true,"^\\pL{9}$":true}}`},
		{"numbers", `{"minimum":-1e-400,"maximum":1e400,"multipleOf":0.` + strings.Repeat("0", rooms.MaxNumberLength-3) + `1}`},
		{"checks per value", `{"anyOf":[` + list(rooms.MaxChecksPerValue-1, `true`) + `]}`},
		{"recursive", `{"$defs":{"n":{"anyOf":[{"type":"string"},{"type":"array","items":{"$ref":"#/$defs/n"}},{"type":"object","additionalProperties":{"$ref":"#/$defs/n"}}]}},"$ref":"#/$defs/n"}`},
		{"dynamic reference", `{"$id":"urn:tree","$dynamicAnchor":"node","type":"object","properties":{"children":{"type":"array","items":{"$dynamicRef":"#node"}}}}`},
		{"draft-07", `{"$schema":"http://json-schema.org/draft-07/schema#","definitions":{"e":{"type":"string","format":"email"}},"properties":{"to":{"$ref":"#/definitions/e"}}}`},
		{"worst", worstSchema()},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			if _, err := rooms.CompileSchema(context.Background(), []byte(tc.schema)); err != nil {
				t.Fatalf("refused: %v", err)
			}
			// A guard against a limit that no longer bounds the compiler,
			// not a benchmark: it takes tens of milliseconds.
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("%d bytes compiled in %v", len(tc.schema), d)
			}
		})
	}
}

func TestCompileSchemaCancelled(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := rooms.CompileSchema(ctx, []byte(`{"type":"string"}`)); !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}
}

func TestPayloadLimits(t *testing.T) {
	t.Parallel()
	anything := mustCompile(t, `{}`)
	wide := mustCompile(t, `{"items":{"anyOf":[`+list(rooms.MaxChecksPerValue-1, `{"type":"string"}`)+`]}}`)
	cases := []struct {
		name    string
		schema  *rooms.Schema
		payload string
		pointer string
		message string // "" for accepted
	}{
		{"64 levels", anything, strings.Repeat("[", 64) + strings.Repeat("]", 64), "", ""},
		{"65 levels", anything, strings.Repeat("[", 65) + strings.Repeat("]", 65), strings.Repeat("/0", 64), "64 levels"},
		{"deep in an object", anything, `{"a":[` + strings.Repeat(`{"b~/":`, 64) + `1` + strings.Repeat(`}`, 64) + `]}`, "/a/0" + strings.Repeat("/b~0~1", 62), "64 levels"},
		{"exponent at the limit", anything, `[1e400,-1e-400]`, "", ""},
		{"exponent beyond", anything, `[0,1e401]`, "/1", "exponent beyond ±400"},
		{"number at the limit", anything, strings.Repeat("9", rooms.MaxNumberLength), "", ""},
		{"number too long", anything, `{"n":` + strings.Repeat("9", rooms.MaxNumberLength+1) + `}`, "/n", "101 characters"},
		{"within the budget", wide, `[` + list(200, `0`) + `]`, "", ""},
		{"beyond the budget", wide, `[` + list(2000, `0`) + `]`, "", "too large to check"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			v, _, err := tc.schema.DecodePayload([]byte(tc.payload))
			if tc.message == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				_ = tc.schema.Validate(v)
				return
			}
			var refused *rooms.PointerError
			if !errors.As(err, &refused) {
				t.Fatalf("error %v, want a *rooms.PointerError", err)
			}
			if refused.Pointer != tc.pointer || !strings.Contains(refused.Message, tc.message) {
				t.Errorf("refused at %q: %q; want %q saying %q", refused.Pointer, refused.Message, tc.pointer, tc.message)
			}
		})
	}
}

func mustCompile(t *testing.T, schema string) *rooms.Schema {
	t.Helper()
	s, err := rooms.CompileSchema(context.Background(), []byte(schema))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// FuzzCompileSchema: any document is compiled or refused with a
// *rooms.PointerError whose pointer, when it is one, points into the
// document; an accepted schema decodes payloads within the limits.
func FuzzCompileSchema(f *testing.F) {
	for _, s := range []string{
		`{}`, `true`, `false`, `null`, `[]`, `1e401`, `{"type":"string","pattern":"^[a-z]+$"}`,
		`{"properties":{"a":{"$ref":"#/$defs/b"}},"$defs":{"b":{"enum":[1,"x",null,[1e400]]}}}`,
		`{"$ref":"#"}`, `{"allOf":[{"$ref":"#/allOf/1"},{"$ref":"#/allOf/0"}]}`,
		`{"patternProperties":{"[a-z]{1000}x":true}}`, `{"minimum":1e999999}`,
		`{"$schema":"http://json-schema.org/draft-04/schema#","items":[{"type":"string"}],"additionalItems":false,"dependencies":{"a":["b"],"c":{"required":["d"]}}}`,
		`{"$id":"urn:t","$dynamicAnchor":"n","properties":{"c":{"items":{"$dynamicRef":"#n"}}}}`,
		`{"$schema":"https://json-schema.org/draft/2019-09/schema","$recursiveAnchor":true,"properties":{"c":{"$recursiveRef":"#"}}}`,
		nested(70, `{}`), fanOut(12), refChain(40),
	} {
		f.Add([]byte(s))
	}
	payloads := []string{`null`, `0`, `"x"`, `[1,"a",{"b":[true]}]`, `{"a":{"b":{"c":1e400}}}`}
	f.Fuzz(func(t *testing.T, doc []byte) {
		s, err := rooms.CompileSchema(context.Background(), doc)
		if err != nil {
			var refused *rooms.PointerError
			if !errors.As(err, &refused) {
				t.Fatalf("error %v (%T), want a *rooms.PointerError", err, err)
			}
			if p := refused.Pointer; strings.HasPrefix(p, "/") && !resolves(t, doc, p) {
				t.Fatalf("pointer %q is not in the schema %s", p, doc)
			}
			return
		}
		for _, p := range payloads {
			v, _, err := s.DecodePayload([]byte(p))
			if err != nil {
				continue // too costly for this schema: refused, not checked
			}
			_ = s.Validate(v)
		}
	})
}

// resolves reports whether the JSON pointer p names a value in doc.
func resolves(t *testing.T, doc []byte, p string) bool {
	t.Helper()
	s, err := rooms.ResolvePointerForTest(doc, p)
	if err != nil {
		t.Fatalf("%s: %v", doc, err)
	}
	return s
}

// TestRegexFormat: drafts 4 to 7 assert format "regex", compiling each
// payload string; a string past the limits on a pattern is refused before
// it is compiled, and the estimate prices each at the most it may cost.
func TestRegexFormat(t *testing.T) {
	t.Parallel()
	s := mustCompile(t, `{"$schema":"http://json-schema.org/draft-07/schema#","type":"array","items":{"format":"regex"}}`)

	t.Run("costly strings", func(t *testing.T) {
		t.Parallel()
		// 250 KB of a 9-byte expression that compiles to 650000 ranges.
		payload := `[` + list(17_000, `"\\pL{1000}N"`) + `]`
		start := time.Now()
		v, _, err := s.DecodePayload([]byte(payload))
		if err == nil {
			_ = s.Validate(v)
		}
		if d := time.Since(start); d > time.Second { // a guard: the check took 2.4 s
			t.Errorf("answered after %v", d)
		}
		var refused *rooms.PointerError
		if !errors.As(err, &refused) || !strings.Contains(refused.Message, "too large to check") {
			t.Errorf("error %v, want too large to check", err)
		}
	})
	cases := []struct {
		name, payload string
		says          string // "" for valid
	}{
		{"regular expressions", `["^[a-z]+$","\\d{3}-\\d{4}","[\\pL\\pN]{1,20}"]`, ""},
		{"invalid", `["a(b"]`, "missing closing )"},
		{"too many instructions", `["\\pL{1000}N"]`, "at most 1000 are allowed"},
		{"a repeat of an alternation", `["(?:a|b{2}){500}"]`, "at most 1000 are allowed"},
		{"too many ranges", `["(?:\\pL{100}){8}"]`, "at most 500000 are allowed"},
		{"too long", `["` + strings.Repeat("a", rooms.MaxPatternLength+1) + `"]`, "at most 1024 are allowed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			v, _, err := s.DecodePayload([]byte(tc.payload))
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			err = s.Validate(v)
			if tc.says == "" {
				if err != nil {
					t.Fatalf("invalid: %v", err)
				}
				return
			}
			var ve *jsonschema.ValidationError
			if !errors.As(err, &ve) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("error %v, want a validation error saying %q", err, tc.says)
			}
		})
	}
}
