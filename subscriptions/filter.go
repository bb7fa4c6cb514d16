package subscriptions

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/roomhub/messaging-api/api"
	"github.com/roomhub/messaging-api/message"
)

// Bounds of an attribute filter, checked before anything in it is looked
// at one by one, so that a filter costs at most a few hundred string
// comparisons per event. The key count and the numeric range are SNS's
// (docs.aws.amazon.com/sns/latest/dg/subscription-filter-policy-constraints.html);
// SNS bounds the product of the lists' lengths at 150, we bound their sum,
// which is what evaluating a filter costs.
const (
	MaxFilterBytes      = 32 << 10 // the attributeFilter JSON as sent
	MaxFilterKeys       = 5        // attributes named
	MaxFilterValues     = 100      // conditions on one attribute, each anything-but string counted
	MaxFilterConditions = 150      // conditions in all, counted alike
	MaxFilterNumber     = 1e9      // |bound| of a numeric condition
)

// filterField names the attribute filter in problems.
const filterField = "attributeFilter"

// AttributeFilter selects events by their attributes, as an SNS filter
// policy does: every attribute it names must satisfy at least one of its
// conditions. It is compiled once, when a subscription is validated or
// loaded, and evaluated for each event routed.
type AttributeFilter struct {
	keys []keyFilter // by name
	// text is the canonical JSON: keys sorted, no spaces, numbers as
	// decimals; the API answers it and the store keeps it.
	text []byte
	// broken marks a stored filter that no longer compiles (the rules
	// tightened after it was stored): it matches nothing, since delivering
	// nothing is safer than delivering everything.
	broken bool
}

type keyFilter struct {
	name  string
	conds []condition
}

type condKind uint8

const (
	condEquals condKind = iota
	condPrefix
	condExists // exists: true
	condAbsent // exists: false
	condNumeric
	condAnythingBut
	condAnythingButPrefix
)

type condition struct {
	kind condKind
	s    string   // equals, prefix, anything-but prefix
	set  []string // anything-but
	// numeric: a comparison with each bound that is set.
	lo, hi bound
	eq     *float64
	canon  any // the condition as the canonical JSON shows it
}

type bound struct {
	v         float64
	set, incl bool
}

// Matches reports whether an event with attrs passes the filter; a nil
// filter passes every event. Small enough to inline, so that routing to a
// subscription without a filter costs one comparison.
func (f *AttributeFilter) Matches(attrs map[string]string) bool {
	return f == nil || f.matches(attrs)
}

func (f *AttributeFilter) matches(attrs map[string]string) bool {
	if f.broken {
		return false
	}
	for i := range f.keys {
		v, ok := attrs[f.keys[i].name]
		if !f.keys[i].matches(v, ok) {
			return false
		}
	}
	return true
}

func (k *keyFilter) matches(v string, present bool) bool {
	var (
		num            float64
		isNum, numDone bool
	)
	for i := range k.conds {
		c := &k.conds[i]
		switch c.kind {
		case condExists:
			if present {
				return true
			}
		case condAbsent:
			if !present {
				return true
			}
		case condEquals:
			if present && v == c.s {
				return true
			}
		case condPrefix:
			if present && strings.HasPrefix(v, c.s) {
				return true
			}
		case condAnythingBut:
			if present && !slices.Contains(c.set, v) {
				return true
			}
		case condAnythingButPrefix:
			if present && !strings.HasPrefix(v, c.s) {
				return true
			}
		case condNumeric:
			if !present {
				continue
			}
			if !numDone {
				num, isNum = parseNumber(v)
				numDone = true
			}
			if isNum && c.inRange(num) {
				return true
			}
		}
	}
	return false
}

func (c *condition) inRange(x float64) bool {
	if c.eq != nil {
		return x == *c.eq
	}
	if c.lo.set && (x < c.lo.v || (x == c.lo.v && !c.lo.incl)) {
		return false
	}
	if c.hi.set && (x > c.hi.v || (x == c.hi.v && !c.hi.incl)) {
		return false
	}
	return true
}

// parseNumber reads an attribute value as a decimal number: an optional
// minus, digits, an optional fraction and exponent (5, -2.5, 007, 1e3).
// Anything else (" 5", "+5", "0x10", "NaN", "5 kg", "") is not a number.
func parseNumber(s string) (float64, bool) {
	i := 0
	digits := func() bool {
		start := i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		return i > start
	}
	if i < len(s) && s[i] == '-' {
		i++
	}
	if !digits() {
		return 0, false
	}
	if i < len(s) && s[i] == '.' {
		i++
		if !digits() {
			return 0, false
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if !digits() {
			return 0, false
		}
	}
	if i != len(s) {
		return 0, false
	}
	f, err := strconv.ParseFloat(s, 64)
	return f, err == nil // out of float64's range: not a number
}

// MarshalJSON answers the canonical JSON.
func (f *AttributeFilter) MarshalJSON() ([]byte, error) {
	if f == nil {
		return []byte("null"), nil
	}
	return f.text, nil
}

// Text is the canonical JSON, as stored.
func (f *AttributeFilter) Text() string { return string(f.text) }

// ParseAttributeFilter validates and compiles the attributeFilter of a
// request, adding what is wrong to probs with the JSON pointer of the bad
// part. A filter that is null or {} selects every event: nil.
func ParseAttributeFilter(raw json.RawMessage, probs *api.Problems) *AttributeFilter {
	return parseFilter(raw, probs)
}

// LoadAttributeFilter compiles a stored filter ("" for none). One that no
// longer compiles matches nothing and keeps its text.
func LoadAttributeFilter(text string) *AttributeFilter {
	if text == "" {
		return nil
	}
	var probs api.Problems
	f := parseFilter(json.RawMessage(text), &probs)
	if probs.Len() > 0 {
		return &AttributeFilter{text: []byte(text), broken: true}
	}
	return f
}

var pointerEscape = strings.NewReplacer("~", "~0", "/", "~1")

func parseFilter(raw json.RawMessage, probs *api.Problems) *AttributeFilter {
	const ptr = "/" + filterField
	if len(raw) > MaxFilterBytes {
		probs.AddPointer(filterField, ptr, fmt.Sprintf("is %d bytes of JSON, more than the %d an attribute filter may have", len(raw), MaxFilterBytes))
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		probs.AddPointer(filterField, ptr, "is not JSON")
		return nil
	}
	if v == nil {
		return nil
	}
	obj, ok := v.(map[string]any)
	if !ok {
		probs.AddPointer(filterField, ptr, `must be an object mapping attribute names to lists of conditions, e.g. {"region": ["eu", "us"]}`)
		return nil
	}
	if len(obj) == 0 {
		return nil
	}
	if len(obj) > MaxFilterKeys {
		probs.AddPointer(filterField, ptr, fmt.Sprintf("names %d attributes, more than the %d a filter may name", len(obj), MaxFilterKeys))
		return nil
	}
	names := make([]string, 0, len(obj))
	for name := range obj {
		names = append(names, name)
	}
	slices.Sort(names)

	// The sizes first, before any condition is looked at.
	before, total := probs.Len(), 0
	for _, name := range names {
		list, _ := obj[name].([]any)
		n := countConditions(list)
		if n > MaxFilterValues {
			probs.AddPointer(filterField, ptr+"/"+pointerEscape.Replace(name),
				fmt.Sprintf("has %d conditions, more than the %d one attribute may have", n, MaxFilterValues))
		}
		total += n
	}
	if total > MaxFilterConditions {
		probs.AddPointer(filterField, ptr, fmt.Sprintf("has %d conditions, more than the %d a filter may have in all", total, MaxFilterConditions))
	}
	if probs.Len() > before {
		return nil
	}

	f := &AttributeFilter{keys: make([]keyFilter, 0, len(names))}
	canon := make(map[string][]any, len(names))
	for _, name := range names {
		p := ptr + "/" + pointerEscape.Replace(name)
		if !message.ValidAttributeName(name) {
			probs.AddPointer(filterField, p, "is not an attribute name: names match "+message.AttributeNamePattern)
			continue
		}
		list, ok := obj[name].([]any)
		switch {
		case !ok:
			probs.AddPointer(filterField, p, `must be a list of conditions, e.g. ["eu", {"prefix": "web-"}]`)
			continue
		case len(list) == 0:
			probs.AddPointer(filterField, p, "must list at least one condition")
			continue
		}
		k := keyFilter{name: name, conds: make([]condition, 0, len(list))}
		for i, item := range list {
			if c, ok := parseCondition(item, p+"/"+strconv.Itoa(i), probs); ok {
				k.conds = append(k.conds, c)
				canon[name] = append(canon[name], c.canon)
			}
		}
		f.keys = append(f.keys, k)
	}
	if probs.Len() > before {
		return nil
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // as the API answers JSON
	if err := enc.Encode(canon); err != nil {
		probs.AddPointer(filterField, ptr, "cannot be encoded: "+err.Error())
		return nil
	}
	f.text = bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	return f
}

// countConditions counts a list's conditions as the bounds do: each
// string of an anything-but list is one.
func countConditions(list []any) int {
	n := 0
	for _, item := range list {
		if obj, ok := item.(map[string]any); ok {
			if set, ok := obj["anything-but"].([]any); ok {
				n += max(1, len(set))
				continue
			}
		}
		n++
	}
	return n
}

// Operators of a condition object.
const (
	opPrefix      = "prefix"
	opNumeric     = "numeric"
	opExists      = "exists"
	opAnythingBut = "anything-but"
)

const conditionShape = `must be a string (the exact value) or an object with one operator: {"prefix": "web-"}, {"numeric": [">=", 5]}, {"exists": true} or {"anything-but": ["free"]}`

func parseCondition(item any, p string, probs *api.Problems) (condition, bool) {
	switch x := item.(type) {
	case string:
		if !filterString(x, p, probs) {
			return condition{}, false
		}
		return condition{kind: condEquals, s: x, canon: x}, true
	case json.Number:
		probs.AddPointer(filterField, p, `is a number, but attribute values are strings: write "`+string(x)+`" to match that text, or {"numeric": ["=", `+string(x)+`]} to compare numbers`)
		return condition{}, false
	case map[string]any:
		if len(x) != 1 {
			probs.AddPointer(filterField, p, conditionShape)
			return condition{}, false
		}
		var op string
		for k := range x {
			op = k
		}
		return parseOperator(op, x[op], p, probs)
	}
	probs.AddPointer(filterField, p, conditionShape)
	return condition{}, false
}

func parseOperator(op string, arg any, p string, probs *api.Problems) (condition, bool) {
	q := p + "/" + pointerEscape.Replace(op)
	switch op {
	case opPrefix:
		s, ok := prefixArg(arg, q, probs)
		return condition{kind: condPrefix, s: s, canon: map[string]any{opPrefix: s}}, ok
	case opExists:
		b, ok := arg.(bool)
		if !ok {
			probs.AddPointer(filterField, q, "must be true (the attribute is present) or false (it is absent)")
			return condition{}, false
		}
		c := condition{kind: condExists, canon: map[string]any{opExists: b}}
		if !b {
			c.kind = condAbsent
		}
		return c, true
	case opNumeric:
		return parseNumeric(arg, q, probs)
	case opAnythingBut:
		return parseAnythingBut(arg, q, probs)
	}
	probs.AddPointer(filterField, p, fmt.Sprintf("has the unknown operator %q: use prefix, numeric, exists or anything-but", op))
	return condition{}, false
}

// filterString checks a string a condition compares attribute values with.
func filterString(s, p string, probs *api.Problems) bool {
	switch {
	case len(s) > message.MaxAttributeValue:
		probs.AddPointer(filterField, p, fmt.Sprintf("is %d bytes, longer than any attribute value (at most %d)", len(s), message.MaxAttributeValue))
		return false
	case strings.IndexByte(s, 0) >= 0:
		probs.AddPointer(filterField, p, "must not contain the NUL character (\\u0000)")
		return false
	}
	return true
}

func prefixArg(arg any, p string, probs *api.Problems) (string, bool) {
	s, ok := arg.(string)
	switch {
	case !ok:
		probs.AddPointer(filterField, p, "must be a string")
		return "", false
	case s == "":
		probs.AddPointer(filterField, p, `must not be empty (every value starts with ""; use {"exists": true})`)
		return "", false
	}
	return s, filterString(s, p, probs)
}

func parseAnythingBut(arg any, p string, probs *api.Problems) (condition, bool) {
	switch x := arg.(type) {
	case string:
		if !filterString(x, p, probs) {
			return condition{}, false
		}
		return condition{kind: condAnythingBut, set: []string{x}, canon: map[string]any{opAnythingBut: []string{x}}}, true
	case []any:
		if len(x) == 0 {
			probs.AddPointer(filterField, p, "must list at least one value")
			return condition{}, false
		}
		set := make([]string, 0, len(x))
		ok := true
		for j, e := range x {
			s, isString := e.(string)
			ep := p + "/" + strconv.Itoa(j)
			switch {
			case !isString:
				probs.AddPointer(filterField, ep, "must be a string: attribute values are strings")
				ok = false
			case filterString(s, ep, probs):
				set = append(set, s)
			default:
				ok = false
			}
		}
		return condition{kind: condAnythingBut, set: set, canon: map[string]any{opAnythingBut: set}}, ok
	case map[string]any:
		if arg, found := x[opPrefix]; found && len(x) == 1 {
			s, ok := prefixArg(arg, p+"/"+opPrefix, probs)
			return condition{kind: condAnythingButPrefix, s: s, canon: map[string]any{opAnythingBut: map[string]any{opPrefix: s}}}, ok
		}
	}
	probs.AddPointer(filterField, p, `must be a string, a list of strings or {"prefix": "…"}`)
	return condition{}, false
}

// Numeric operators: the lower bounds, the upper bounds, and equality.
var numericOps = map[string]struct{ lower, upper bool }{
	">": {lower: true}, ">=": {lower: true}, "<": {upper: true}, "<=": {upper: true}, "=": {},
}

const numericShape = `must be [operator, number] or a range [">", 0, "<=", 5]; operators are =, <, <=, > and >=`

func parseNumeric(arg any, p string, probs *api.Problems) (condition, bool) {
	list, ok := arg.([]any)
	if !ok || (len(list) != 2 && len(list) != 4) {
		probs.AddPointer(filterField, p, numericShape)
		return condition{}, false
	}
	c := condition{kind: condNumeric}
	canon := make([]any, 0, len(list))
	before := probs.Len()
	for i := 0; i < len(list); i += 2 {
		op, isOp := list[i].(string)
		kind, known := numericOps[op]
		if !isOp || !known {
			probs.AddPointer(filterField, p+"/"+strconv.Itoa(i), "must be one of =, <, <=, > and >=")
		}
		n, isNum := list[i+1].(json.Number)
		v, err := n.Float64()
		if !isNum || err != nil || v < -MaxFilterNumber || v > MaxFilterNumber {
			probs.AddPointer(filterField, p+"/"+strconv.Itoa(i+1), fmt.Sprintf("must be a number from %d to %d", int64(-MaxFilterNumber), int64(MaxFilterNumber)))
			continue
		}
		if !isOp || !known {
			continue
		}
		canon = append(canon, op, json.Number(strconv.FormatFloat(v, 'f', -1, 64)))
		switch {
		case op == "=":
			c.eq = &v
		case kind.lower && !c.lo.set:
			c.lo = bound{v: v, set: true, incl: op == ">="}
		case kind.upper && !c.hi.set:
			c.hi = bound{v: v, set: true, incl: op == "<="}
		default:
			probs.AddPointer(filterField, p, "a range takes one lower bound (> or >=) and one upper bound (< or <=)")
		}
	}
	if probs.Len() > before {
		return condition{}, false
	}
	if len(list) == 4 && c.eq != nil {
		probs.AddPointer(filterField, p, `"=" takes no second comparison: a range takes one lower bound (> or >=) and one upper bound (< or <=)`)
		return condition{}, false
	}
	if c.lo.set && c.hi.set && (c.lo.v > c.hi.v || (c.lo.v == c.hi.v && (!c.lo.incl || !c.hi.incl))) {
		probs.AddPointer(filterField, p, "is an empty range: no number lies in it")
		return condition{}, false
	}
	c.canon = map[string]any{opNumeric: canon}
	return c, true
}
