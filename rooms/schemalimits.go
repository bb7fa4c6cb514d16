package rooms

import (
	"encoding/json"
	"fmt"
	"regexp/syntax"
	"slices"
	"strconv"
	"strings"
)

// Limits on a version's JSON Schema and on the payloads checked against it
// (docs/api-guide.md, "Limits"). The schema compiler and validator cannot be
// interrupted, so these bound what they are given: a schema within them
// compiles in a fraction of a second, and a payload is checked only when the
// estimated cost of the check is within MaxValidationCost.
const (
	// MaxSchemaSize is the largest schema in bytes, as sent.
	MaxSchemaSize = 256 << 10
	// MaxSchemaDepth is how deeply a schema's JSON objects and arrays nest.
	MaxSchemaDepth = 64
	// MaxSchemaValues is how many JSON values a schema holds in total
	// (every object member and array element, keywords and data alike).
	MaxSchemaValues = 20_000
	// MaxSubschemas is how many schemas a schema holds in schema positions
	// (the root, properties, items, allOf, $defs, ...).
	MaxSubschemas = 5_000
	// MaxSchemaRefs is how many $ref, $dynamicRef and $recursiveRef a schema has.
	MaxSchemaRefs = 1_000
	// MaxSchemaRefChain is how many references may be followed one after
	// another without descending into the payload (a $ref to a $ref to ...).
	MaxSchemaRefChain = 32
	// MaxSchemaPatterns is how many regular expressions (pattern keywords and
	// patternProperties names) a schema has.
	MaxSchemaPatterns = 256
	// MaxPatternLength is the longest regular expression in bytes.
	MaxPatternLength = 1024
	// MaxPatternProgram is the most instructions one compiled regular
	// expression may have: matching costs this much per byte of input.
	// Compiling costs more than linearly in it and in the ranges of the
	// character classes (\pL has about 650), so a schema's expressions have
	// at most MaxPatternProgramTotal instructions and MaxPatternRangesTotal
	// ranges in all.
	MaxPatternProgram      = 1_000
	MaxPatternProgramTotal = 10_000
	MaxPatternRangesTotal  = 500_000
	// MaxNumberLength is the longest number literal, in a schema or a
	// payload, and MaxNumberExponent the largest exponent it may write
	// (1e400; a float64 reaches 1.8e308).
	MaxNumberLength   = 100
	MaxNumberExponent = 400
	// MaxChecksPerValue is how many subschemas one payload value may be
	// checked against (nested allOf, anyOf, oneOf and $ref multiply).
	MaxChecksPerValue = 1_000
	// MaxPayloadDepth is how deeply a payload's objects and arrays nest.
	MaxPayloadDepth = 64
	// MaxValidationCost bounds the estimated cost of checking one payload
	// against its schema, in ticks (about a nanosecond each on one core).
	MaxValidationCost = 500_000_000
	// MaxRequestValidationCost bounds the estimated cost of checking all the
	// payloads of one request (a batch holds up to 100): the same as one
	// payload's, as what a request may cost does not depend on how its
	// events are split.
	MaxRequestValidationCost = MaxValidationCost
)

// PointerError is a value refused where it is: Pointer is the RFC 6901 JSON
// pointer to it within the schema or payload ("" for the whole document).
type PointerError struct {
	Pointer string
	Message string
}

func (e *PointerError) Error() string {
	if e.Pointer == "" {
		return e.Message
	}
	return "at " + e.Pointer + ": " + e.Message
}

// pointerToken escapes one JSON pointer reference token (RFC 6901).
func pointerToken(s string) string {
	if !strings.ContainsAny(s, "~/") {
		return s
	}
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(s)
}

// checkNumber refuses a number literal that is long or has a large
// exponent: the validator compares numbers as big.Rat, whose cost grows with
// the exponent (1e999999 takes tens of milliseconds).
func checkNumber(n json.Number) string {
	s := string(n)
	if len(s) > MaxNumberLength {
		return fmt.Sprintf("number has %d characters; at most %d are allowed", len(s), MaxNumberLength)
	}
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		if e, err := strconv.Atoi(strings.TrimPrefix(s[i+1:], "+")); err != nil || e < -MaxNumberExponent || e > MaxNumberExponent {
			return fmt.Sprintf("number has an exponent beyond ±%d", MaxNumberExponent)
		}
	}
	return ""
}

// Keywords whose value is one schema, an array of schemas, or an object whose
// member values are schemas (drafts 4 to 2020-12).
var (
	schemaKeywords = map[string]bool{
		"not": true, "if": true, "then": true, "else": true, "items": true, "additionalItems": true,
		"contains": true, "additionalProperties": true, "propertyNames": true,
		"unevaluatedItems": true, "unevaluatedProperties": true, "contentSchema": true,
	}
	schemaArrayKeywords = map[string]bool{
		"allOf": true, "anyOf": true, "oneOf": true, "prefixItems": true, "items": true,
	}
	schemaMapKeywords = map[string]bool{
		"properties": true, "patternProperties": true, "$defs": true, "definitions": true,
		"dependentSchemas": true, "dependencies": true,
	}
	refKeywords = map[string]bool{"$ref": true, "$dynamicRef": true, "$recursiveRef": true}
)

// schemaWalk is the pre-pass over a decoded schema that enforces the limits
// before the compiler sees it. It recurses at most MaxSchemaDepth+1 levels
// and stops at the first limit passed.
type schemaWalk struct {
	values, subschemas, refs, patterns int
	program, ranges                    int // of the patterns so far
	err                                *PointerError
}

// checkSchemaDocument enforces the document limits on a decoded schema.
func checkSchemaDocument(doc any) *PointerError {
	var w schemaWalk
	w.schema(doc, "", 0)
	return w.err
}

func (w *schemaWalk) fail(ptr, format string, args ...any) {
	if w.err == nil {
		w.err = &PointerError{Pointer: ptr, Message: fmt.Sprintf(format, args...)}
	}
}

// value counts v and its depth; it reports whether the walk goes on.
func (w *schemaWalk) value(v any, ptr string, depth int) bool {
	if w.err != nil {
		return false
	}
	w.values++
	if w.values > MaxSchemaValues {
		w.fail(ptr, "has more than %d JSON values", MaxSchemaValues)
		return false
	}
	switch v := v.(type) {
	case map[string]any, []any:
		if depth >= MaxSchemaDepth {
			w.fail(ptr, "nests more than %d levels deep", MaxSchemaDepth)
			return false
		}
	case json.Number:
		if msg := checkNumber(v); msg != "" {
			w.fail(ptr, "%s", msg)
			return false
		}
	}
	return true
}

// data walks a value that is not a schema (enum, const, default, examples, ...).
func (w *schemaWalk) data(v any, ptr string, depth int) {
	if !w.value(v, ptr, depth) {
		return
	}
	switch v := v.(type) {
	case map[string]any:
		for _, k := range sortedKeys(v) {
			w.data(v[k], ptr+"/"+pointerToken(k), depth+1)
		}
	case []any:
		for i, e := range v {
			w.data(e, ptr+"/"+strconv.Itoa(i), depth+1)
		}
	}
}

// schema walks a value in a schema position.
func (w *schemaWalk) schema(v any, ptr string, depth int) {
	if !w.value(v, ptr, depth) {
		return
	}
	w.subschemas++
	if w.subschemas > MaxSubschemas {
		w.fail(ptr, "has more than %d subschemas", MaxSubschemas)
		return
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return // a boolean schema, or not a schema at all (the compiler says so)
	}
	for _, k := range sortedKeys(obj) {
		val, kptr := obj[k], ptr+"/"+pointerToken(k)
		switch {
		case w.err != nil:
			return
		case refKeywords[k]:
			w.refs++
			if w.refs > MaxSchemaRefs {
				w.fail(kptr, "has more than %d references ($ref, $dynamicRef, $recursiveRef)", MaxSchemaRefs)
				return
			}
			w.data(val, kptr, depth+1)
		case k == "pattern":
			if s, ok := val.(string); ok {
				w.pattern(s, kptr)
			}
			w.data(val, kptr, depth+1)
		case schemaArrayKeywords[k] && isArray(val):
			if w.value(val, kptr, depth+1) {
				for i, e := range val.([]any) {
					w.schema(e, kptr+"/"+strconv.Itoa(i), depth+2)
				}
			}
		case schemaKeywords[k]:
			w.schema(val, kptr, depth+1)
		case schemaMapKeywords[k] && isObject(val):
			if !w.value(val, kptr, depth+1) {
				return
			}
			m := val.(map[string]any)
			for _, name := range sortedKeys(m) {
				mptr := kptr + "/" + pointerToken(name)
				if k == "patternProperties" {
					w.pattern(name, mptr)
				}
				if k == "dependencies" && isArray(m[name]) {
					w.data(m[name], mptr, depth+2) // a list of property names
					continue
				}
				w.schema(m[name], mptr, depth+2)
			}
		default:
			w.data(val, kptr, depth+1)
		}
	}
}

// pattern counts a regular expression and checks its size.
func (w *schemaWalk) pattern(re, ptr string) {
	w.patterns++
	if w.patterns > MaxSchemaPatterns {
		w.fail(ptr, "has more than %d regular expressions (pattern, patternProperties)", MaxSchemaPatterns)
		return
	}
	program, ranges, msg := checkPattern(re)
	if msg != "" {
		w.fail(ptr, "%s", msg)
		return
	}
	w.program += program
	w.ranges += ranges
	switch {
	case w.program > MaxPatternProgramTotal:
		w.fail(ptr, "the regular expressions compile to more than %d instructions in all", MaxPatternProgramTotal)
	case w.ranges > MaxPatternRangesTotal:
		w.fail(ptr, "the regular expressions' character classes have more than %d ranges in all (a class such as \\pL has about 650, and a repeat copies it)", MaxPatternRangesTotal)
	}
}

// checkPattern applies the limits on one regular expression: its length,
// MaxPatternProgram instructions, and MaxPatternRangesTotal character class
// ranges (the most a schema's expressions have in all). It returns the
// instructions and ranges re compiles to, or why it is refused; 0, 0, "" if
// it does not parse: compiling it reports that.
func checkPattern(re string) (program, ranges int, msg string) {
	if len(re) > MaxPatternLength {
		return 0, 0, fmt.Sprintf("the regular expression has %d bytes; at most %d are allowed", len(re), MaxPatternLength)
	}
	parsed, err := syntax.Parse(re, syntax.Perl)
	if err != nil {
		return 0, 0, ""
	}
	// Simplify expands bounded repeats, at a cost that grows with what they
	// expand to: the parse tree refuses most of what is past the limits first.
	if program, ranges = treeSize(parsed); program <= MaxPatternProgram && ranges <= MaxPatternRangesTotal {
		program, ranges = progSize(parsed)
	}
	switch {
	case program > MaxPatternProgram:
		return program, ranges, fmt.Sprintf("the regular expression compiles to %d instructions or more; at most %d are allowed (bounded repeats such as {1000} multiply)", program, MaxPatternProgram)
	case ranges > MaxPatternRangesTotal:
		return program, ranges, fmt.Sprintf("the regular expression's character classes have %d ranges or more; at most %d are allowed (a class such as \\pL has about 650, and a repeat copies it)", ranges, MaxPatternRangesTotal)
	}
	return program, ranges, ""
}

// patternSize is the number of instructions of re compiled as Go's regexp
// package does (the validator's engine), and the ranges of their character
// classes; 0, 0 if it does not parse: the compiler reports that.
func patternSize(re string) (program, ranges int) {
	parsed, err := syntax.Parse(re, syntax.Perl)
	if err != nil {
		return 0, 0
	}
	return progSize(parsed)
}

func progSize(parsed *syntax.Regexp) (program, ranges int) {
	prog, err := syntax.Compile(parsed.Simplify())
	if err != nil {
		return 0, 0
	}
	for _, in := range prog.Inst {
		ranges += len(in.Rune) / 2
	}
	return len(prog.Inst), ranges
}

// treeSize bounds from below what progSize counts, without expanding the
// repeats: a literal compiles to an instruction per rune, a character class
// to one with its ranges, a capture, alternative, star, plus or question
// mark adds at least one, and x{n,m} copies x max(n, m) times.
func treeSize(re *syntax.Regexp) (program, ranges int) {
	switch re.Op {
	case syntax.OpLiteral:
		return len(re.Rune), 0
	case syntax.OpCharClass:
		return 1, len(re.Rune) / 2
	case syntax.OpConcat, syntax.OpAlternate, syntax.OpCapture, syntax.OpStar, syntax.OpPlus, syntax.OpQuest, syntax.OpRepeat:
		for _, sub := range re.Sub {
			p, r := treeSize(sub)
			program, ranges = program+p, ranges+r
		}
		switch re.Op {
		case syntax.OpConcat:
		case syntax.OpRepeat:
			// The parser refuses nested repeats past 1000 copies in all.
			n := max(re.Min, re.Max)
			program, ranges = program*n, ranges*n
		default:
			program++
		}
		return program, ranges
	default: // empty, any character, anchors, word boundaries, no match
		return 1, 0
	}
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func isArray(v any) bool  { _, ok := v.([]any); return ok }
func isObject(v any) bool { _, ok := v.(map[string]any); return ok }
