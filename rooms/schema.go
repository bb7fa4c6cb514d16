package rooms

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// schemaURL is the name a version's schema is compiled under. Schemas may not
// load anything remote: a $ref outside the document fails to compile.
const schemaURL = "urn:messaging-api:schema.json"

// Schema is a version's compiled JSON Schema, with a bound on what checking
// a payload against it may cost.
type Schema struct {
	compiled *jsonschema.Schema
	cost     schemaCost
}

// CompileSchema checks that raw is a JSON Schema (draft 2020-12 unless its
// $schema says otherwise) within the schema limits, and compiles it for
// validating payloads. A schema refused is a *PointerError saying where;
// another error is ctx's.
//
// The compiler cannot be interrupted: the limits, checked on the decoded
// document first, are what keep it fast; ctx is checked between the steps.
func CompileSchema(ctx context.Context, raw []byte) (*Schema, error) {
	if len(raw) > MaxSchemaSize {
		return nil, &PointerError{Message: fmt.Sprintf("has %d bytes; at most %d are allowed", len(raw), MaxSchemaSize)}
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, &PointerError{Message: fmt.Sprintf("is not JSON: %v", err)}
	}
	switch doc.(type) {
	case map[string]any, bool:
	default:
		return nil, &PointerError{Message: "must be a JSON Schema: an object or a boolean"}
	}
	if perr := checkSchemaDocument(doc); perr != nil {
		return nil, perr
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(noRemoteLoader{})
	c.UseRegexpEngine(compileRegexp)
	if err := c.AddResource(schemaURL, doc); err != nil {
		return nil, &PointerError{Message: fmt.Sprintf("is not a valid JSON Schema: %v", err)}
	}
	sch, err := c.Compile(schemaURL)
	if err != nil {
		return nil, &PointerError{Message: "is not a valid JSON Schema: " + schemaErrorText(err)}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	cost, err := analyseSchema(ctx, sch)
	if err != nil {
		return nil, err
	}
	return &Schema{compiled: sch, cost: cost}, nil
}

// compileRegexp is the compiler's regular expression engine: the schema's
// patterns, and the payload strings that format "regex" asserts (drafts 4 to
// 7 do), go through it. A string past the limits on a pattern is refused
// before it is compiled, as compiling costs with what it expands to (\pL{1000}
// has 9 bytes and 650000 ranges).
func compileRegexp(s string) (jsonschema.Regexp, error) {
	if _, _, msg := checkPattern(s); msg != "" {
		return nil, errors.New(msg)
	}
	return regexp.Compile(s)
}

// Validate checks a payload DecodePayload returned against the schema; a
// violation is a *jsonschema.ValidationError.
func (s *Schema) Validate(payload any) error {
	return s.compiled.Validate(payload)
}

// DecodePayload decodes a payload for Validate, with the estimated cost of
// checking it (for a ValidationBudget). It refuses, with a *PointerError, a
// payload nested deeper than MaxPayloadDepth, with a number beyond the
// number limits, or whose check against the schema is estimated to cost
// more than MaxValidationCost.
func (s *Schema) DecodePayload(payload []byte) (v any, cost int64, err error) {
	v, err = jsonschema.UnmarshalJSON(bytes.NewReader(payload))
	if err != nil {
		return nil, 0, err
	}
	shape, perr := measurePayload(v)
	if perr != nil {
		return nil, 0, perr
	}
	if cost = s.cost.payloadCost(shape); cost > MaxValidationCost {
		return nil, 0, &PointerError{Message: fmt.Sprintf(
			"is too large to check against this version's schema: the check is estimated at %s of CPU, more than the %s allowed; "+
				"send a smaller payload, or use a schema with fewer alternatives (anyOf, oneOf), patterns or enum values",
			ticksText(cost), ticksText(MaxValidationCost))}
	}
	return v, cost, nil
}

// ValidationBudget sums the estimated costs of checking the payloads of one
// request.
type ValidationBudget struct{ spent int64 }

// Spend adds the cost of checking one more payload. It refuses, with a
// *PointerError, the payload that takes the sum past
// MaxRequestValidationCost: none of the request's payloads is to be checked.
func (b *ValidationBudget) Spend(cost int64) *PointerError {
	b.spent = satAdd(b.spent, cost)
	if b.spent <= MaxRequestValidationCost {
		return nil
	}
	return &PointerError{Message: fmt.Sprintf(
		"with the payloads before it, checking the request's payloads is estimated at %s of CPU, more than the %s one request may take; "+
			"send the messages in smaller batches",
		ticksText(b.spent), ticksText(MaxRequestValidationCost))}
}

// ticksText writes ticks (about a nanosecond each) as seconds.
func ticksText(t int64) string {
	if t >= costCap {
		return "unbounded time"
	}
	return strconv.FormatFloat(float64(t)/1e9, 'g', 2, 64) + " s"
}

// payloadShape counts a payload's values, numbers and bytes by depth.
type payloadShape struct {
	values   []int64
	numbers  []int64
	bytes    []int64
	keyBytes []int64 // of the member names of the objects
}

// measurePayload walks a decoded payload down to MaxPayloadDepth.
func measurePayload(v any) (payloadShape, *PointerError) {
	var p payloadShape
	var tokens []string // the path of a refused value, innermost first
	var walk func(v any, depth int) (int64, *PointerError)
	walk = func(v any, depth int) (int64, *PointerError) {
		if depth == len(p.values) {
			p.values, p.numbers = append(p.values, 0), append(p.numbers, 0)
			p.bytes, p.keyBytes = append(p.bytes, 0), append(p.keyBytes, 0)
		}
		switch v.(type) {
		case map[string]any, []any:
			if depth >= MaxPayloadDepth {
				return 0, &PointerError{Message: fmt.Sprintf("nests more than %d levels deep", MaxPayloadDepth)}
			}
		}
		var size int64
		switch v := v.(type) {
		case map[string]any:
			size = 2
			for k, e := range v {
				n, err := walk(e, depth+1)
				if err != nil {
					tokens = append(tokens, k)
					return 0, err
				}
				size += int64(len(k)) + 4 + n
				p.keyBytes[depth] += int64(len(k))
			}
		case []any:
			size = 2
			for i, e := range v {
				n, err := walk(e, depth+1)
				if err != nil {
					tokens = append(tokens, strconv.Itoa(i))
					return 0, err
				}
				size += n + 1
			}
		case string:
			size = int64(len(v)) + 2
		case json.Number:
			if msg := checkNumber(v); msg != "" {
				return 0, &PointerError{Message: msg}
			}
			size = int64(len(v))
			p.numbers[depth]++
		default:
			size = 5
		}
		p.values[depth]++
		p.bytes[depth] += size
		return size, nil
	}
	if _, err := walk(v, 0); err != nil {
		var b strings.Builder
		for i := len(tokens) - 1; i >= 0; i-- {
			b.WriteString("/" + pointerToken(tokens[i]))
		}
		err.Pointer = b.String()
		return payloadShape{}, err
	}
	return p, nil
}

func schemaErrorText(err error) string {
	s := err.Error()
	return strings.ReplaceAll(s, schemaURL, "schema")
}

type noRemoteLoader struct{}

func (noRemoteLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("loading %q: schemas must be self-contained (no remote $ref)", url)
}
