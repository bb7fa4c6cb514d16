package rooms

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// What the validator's work costs, in ticks (about a nanosecond each),
// measured on jsonschema/v6 and rounded up: a subschema evaluated at one
// value, with its error when it fails; a payload number checked against
// minimum, maximum or multipleOf, or compared with a number of an enum or
// const (both as big.Rat); another enum or const entry compared; a required
// name looked up; and, per byte of the value (of its member names for
// patternProperties), a regular expression instruction, a length count, a
// uniqueItems hash and a format check. Format "regex" compiles the value:
// per byte, parsing it (a character class such as \pL builds 650 ranges);
// per value, what its repeats expand to within the limits on a pattern.
const (
	tickCheck           = 1_000
	tickNumeric         = 5_000
	tickNumberCompare   = 8_000
	tickValueCompare    = 20
	tickRequired        = 50
	tickPatternByte     = 30
	tickLengthByte      = 1
	tickUniqueByte      = 30
	tickFormatByte      = 20
	tickRegexFormat     = 500_000
	tickRegexFormatByte = 20_000
	tickCompareByte     = 2
)

// costCap keeps the estimates from overflowing: anything near it is far
// beyond every limit.
const costCap = 1 << 60

func satAdd(a, b int64) int64 { return min(a+b, costCap) }

func satMul(a, b int64) int64 {
	if a == 0 || b == 0 {
		return 0
	}
	if a > costCap/b {
		return costCap
	}
	return a * b
}

// schemaCost is what checking one payload value may cost, by the value's
// depth in the payload (0 for the payload itself).
type schemaCost struct {
	checks    []int64 // subschemas evaluated at one value
	ticks     []int64 // ticks of those evaluations
	perNumber []int64 // ticks they add when the value is a number
	perByte   []int64 // ticks per byte of the value
	perKey    []int64 // ticks per byte of the value's member names
}

// costNode is one compiled subschema with its edges: in-place applicators
// ($ref, allOf, if, ...) apply to the same payload value; the others to a
// child of an array or an object. At a child, at most one of the "one"
// subschemas applies (properties by name; prefixItems by index; else
// additionalProperties or items) and every "all" one may.
//
// A $dynamicRef or $recursiveRef resolves at validation to one of several
// subschemas: each is a group in dynamic, of which one applies.
type costNode struct {
	s                                         *jsonschema.Schema
	inPlace                                   []costEdge
	dynamic                                   [][]int
	arrayOne, arrayAll, objectOne, objectAll  []int
	checks, ticks, perNumber, perByte, perKey int64 // weights of one evaluation
}

// inPlaceTargets calls f with every subschema n applies in place.
func (n *costNode) inPlaceTargets(f func(to int, ref bool)) {
	for _, e := range n.inPlace {
		f(e.to, e.ref)
	}
	for _, group := range n.dynamic {
		for _, to := range group {
			f(to, true)
		}
	}
}

// inPlaceCost sums cost over n's in-place subschemas, the most costly
// target of each dynamic reference.
func (n *costNode) inPlaceCost(cost []int64) int64 {
	var sum int64
	for _, e := range n.inPlace {
		sum = satAdd(sum, cost[e.to])
	}
	for _, group := range n.dynamic {
		var best int64
		for _, to := range group {
			best = max(best, cost[to])
		}
		sum = satAdd(sum, best)
	}
	return sum
}

type costEdge struct {
	to  int
	ref bool // a $ref, $dynamicRef or $recursiveRef
}

type costGraph struct {
	nodes []costNode
	index map[*jsonschema.Schema]int
}

func (g *costGraph) add(s *jsonschema.Schema) int {
	if i, ok := g.index[s]; ok {
		return i
	}
	g.index[s] = len(g.nodes)
	g.nodes = append(g.nodes, costNode{s: s})
	return len(g.nodes) - 1
}

// analyseSchema bounds what checking a payload against root may cost, and
// refuses a schema whose references loop at one value, chain too long, or
// make one value be checked against too many subschemas.
func analyseSchema(ctx context.Context, root *jsonschema.Schema) (schemaCost, error) {
	g := &costGraph{index: map[*jsonschema.Schema]int{}}
	g.add(root)
	for i := 0; i < len(g.nodes); i++ {
		if len(g.nodes) > 2*MaxSubschemas { // references into a built-in metaschema add some
			return schemaCost{}, &PointerError{Message: fmt.Sprintf("has more than %d subschemas", MaxSubschemas)}
		}
		g.link(i)
	}
	g.linkDynamic()
	order, cyclic := g.inPlaceOrder()
	if cyclic >= 0 {
		return schemaCost{}, &PointerError{Pointer: schemaPointer(g.nodes[cyclic].s),
			Message: "refers back to itself without descending into the payload (a $ref loop)"}
	}
	if n, at := g.longestRefChain(order); n > MaxSchemaRefChain {
		return schemaCost{}, &PointerError{Pointer: schemaPointer(g.nodes[at].s),
			Message: fmt.Sprintf("a chain of %d references starts here; at most %d are allowed", n, MaxSchemaRefChain)}
	}
	var cost schemaCost
	for _, kind := range []struct {
		out    *[]int64
		weight func(costNode) int64
	}{
		{&cost.checks, func(n costNode) int64 { return n.checks }},
		{&cost.ticks, func(n costNode) int64 { return n.ticks }},
		{&cost.perNumber, func(n costNode) int64 { return n.perNumber }},
		{&cost.perByte, func(n costNode) int64 { return n.perByte }},
		{&cost.perKey, func(n costNode) int64 { return n.perKey }},
	} {
		if err := ctx.Err(); err != nil {
			return schemaCost{}, err
		}
		*kind.out = g.perDepth(order, kind.weight)
	}
	for d, n := range cost.checks {
		if n > MaxChecksPerValue {
			return schemaCost{}, &PointerError{Message: fmt.Sprintf(
				"a payload value at depth %d could be checked against %s subschemas; at most %d are allowed (allOf, anyOf, oneOf, if/then/else and references multiply)",
				d, countText(n), MaxChecksPerValue)}
		}
	}
	return cost, nil
}

func countText(n int64) string {
	if n >= costCap {
		return "unboundedly many"
	}
	return fmt.Sprint(n)
}

// schemaPointer is the JSON pointer of a compiled subschema within the
// version's schema (its full location when it is in a built-in metaschema).
func schemaPointer(s *jsonschema.Schema) string {
	if p, ok := strings.CutPrefix(s.Location, schemaURL+"#"); ok {
		return p
	}
	return s.Location
}

// link records node i's edges and weights, adding the subschemas it names.
func (g *costGraph) link(i int) {
	s := g.nodes[i].s
	n := costNode{s: s, checks: 1, ticks: tickCheck}
	inPlace := func(c *jsonschema.Schema, ref bool) {
		if c != nil {
			n.inPlace = append(n.inPlace, costEdge{to: g.add(c), ref: ref})
		}
	}
	add := func(list *[]int, cs ...*jsonschema.Schema) {
		for _, c := range cs {
			if c != nil {
				*list = append(*list, g.add(c))
			}
		}
	}
	inPlace(s.Ref, true)
	if s.RecursiveRef != nil {
		g.add(s.RecursiveRef) // linkDynamic adds the edges
	}
	if s.DynamicRef != nil && s.DynamicRef.Ref != nil {
		g.add(s.DynamicRef.Ref)
	}
	inPlace(s.Not, false)
	inPlace(s.If, false)
	inPlace(s.Then, false)
	inPlace(s.Else, false)
	for _, list := range [][]*jsonschema.Schema{s.AllOf, s.AnyOf, s.OneOf} {
		for _, c := range list {
			inPlace(c, false)
		}
	}
	for _, c := range s.DependentSchemas {
		inPlace(c, false)
	}
	for _, d := range s.Dependencies {
		switch d := d.(type) {
		case *jsonschema.Schema:
			inPlace(d, false)
		case []string:
			n.ticks = satAdd(n.ticks, int64(len(d))*tickRequired)
		}
	}

	add(&n.arrayOne, s.PrefixItems...)
	add(&n.arrayOne, s.Items2020)
	switch items := s.Items.(type) {
	case *jsonschema.Schema:
		add(&n.arrayOne, items)
	case []*jsonschema.Schema:
		add(&n.arrayOne, items...)
	}
	if c, ok := s.AdditionalItems.(*jsonschema.Schema); ok {
		add(&n.arrayOne, c)
	}
	add(&n.arrayAll, s.Contains, s.UnevaluatedItems)
	for _, c := range s.Properties {
		add(&n.objectOne, c)
	}
	if c, ok := s.AdditionalProperties.(*jsonschema.Schema); ok {
		add(&n.objectOne, c)
	}
	add(&n.objectAll, s.UnevaluatedProperties, s.PropertyNames)
	for re, c := range s.PatternProperties {
		add(&n.objectAll, c)
		program, _ := patternSize(re.String())
		n.perKey = satAdd(n.perKey, int64(program)*tickPatternByte)
	}

	if s.Enum != nil {
		for _, v := range s.Enum.Values {
			n.compare(v)
		}
	}
	if s.Const != nil {
		n.compare(*s.Const)
	}
	if s.Minimum != nil || s.Maximum != nil || s.ExclusiveMinimum != nil || s.ExclusiveMaximum != nil || s.MultipleOf != nil {
		n.perNumber = satAdd(n.perNumber, tickNumeric)
	}
	n.ticks = satAdd(n.ticks, int64(len(s.Required))*tickRequired)
	for _, names := range s.DependentRequired {
		n.ticks = satAdd(n.ticks, int64(len(names))*tickRequired)
	}
	if s.Pattern != nil {
		program, _ := patternSize(s.Pattern.String())
		n.perByte = satAdd(n.perByte, int64(program)*tickPatternByte)
	}
	if s.MinLength != nil || s.MaxLength != nil {
		n.perByte += tickLengthByte
	}
	if s.UniqueItems {
		n.perByte += tickUniqueByte
	}
	if s.Format != nil {
		if s.Format.Name == "regex" {
			n.ticks = satAdd(n.ticks, tickRegexFormat)
			n.perByte = satAdd(n.perByte, tickRegexFormatByte)
		} else {
			n.perByte += tickFormatByte
		}
	}
	g.nodes[i] = n
}

// compare adds what comparing a payload value with v may cost: a number
// with a number (as big.Rat), anything else by walking both.
func (n *costNode) compare(v any) {
	n.perByte = satAdd(n.perByte, tickCompareByte)
	if _, ok := v.(json.Number); ok {
		n.perNumber = satAdd(n.perNumber, tickNumberCompare)
		return
	}
	n.ticks = satAdd(n.ticks, valueTicks(v))
}

func valueTicks(v any) int64 {
	t := int64(tickValueCompare)
	switch v := v.(type) {
	case map[string]any:
		for _, e := range v {
			t = satAdd(t, valueTicks(e))
		}
	case []any:
		for _, e := range v {
			t = satAdd(t, valueTicks(e))
		}
	case json.Number:
		t = tickNumberCompare
	}
	return t
}

// linkDynamic adds the targets a $dynamicRef or $recursiveRef may resolve to
// at validation: its initial target, or any subschema with the matching
// anchor.
func (g *costGraph) linkDynamic() {
	for i := range g.nodes {
		s := g.nodes[i].s
		if s.DynamicRef != nil && s.DynamicRef.Ref != nil {
			group := []int{g.index[s.DynamicRef.Ref]}
			if a := s.DynamicRef.Anchor; a != "" {
				for j, t := range g.nodes {
					if t.s.DynamicAnchor == a && t.s != s.DynamicRef.Ref {
						group = append(group, j)
					}
				}
			}
			g.nodes[i].dynamic = append(g.nodes[i].dynamic, group)
		}
		if s.RecursiveRef != nil {
			group := []int{g.index[s.RecursiveRef]}
			for j, t := range g.nodes {
				if t.s.RecursiveAnchor && t.s != s.RecursiveRef {
					group = append(group, j)
				}
			}
			g.nodes[i].dynamic = append(g.nodes[i].dynamic, group)
		}
	}
}

// inPlaceOrder sorts the nodes so that each comes before the subschemas it
// applies in place (Kahn's algorithm); cyclic is a node on a loop of
// in-place edges, or -1.
func (g *costGraph) inPlaceOrder() (order []int, cyclic int) {
	indegree := make([]int, len(g.nodes))
	for _, n := range g.nodes {
		n.inPlaceTargets(func(to int, _ bool) { indegree[to]++ })
	}
	for i, d := range indegree {
		if d == 0 {
			order = append(order, i)
		}
	}
	for k := 0; k < len(order); k++ {
		g.nodes[order[k]].inPlaceTargets(func(to int, _ bool) {
			if indegree[to]--; indegree[to] == 0 {
				order = append(order, to)
			}
		})
	}
	if len(order) < len(g.nodes) {
		return nil, g.onLoop()
	}
	return order, -1
}

// onLoop finds a node on a loop of in-place edges, or -1.
func (g *costGraph) onLoop() int {
	const (
		unseen = iota
		open
		done
	)
	state := make([]int, len(g.nodes))
	var visit func(i int) int
	visit = func(i int) int {
		state[i] = open
		found := -1
		g.nodes[i].inPlaceTargets(func(to int, _ bool) {
			switch {
			case found >= 0:
			case state[to] == open:
				found = to
			case state[to] == unseen:
				found = visit(to)
			}
		})
		state[i] = done
		return found
	}
	for i := range g.nodes {
		if state[i] == unseen {
			if at := visit(i); at >= 0 {
				return at
			}
		}
	}
	return -1
}

// longestRefChain is the most references followed one after another at one
// value, and the node where that chain starts.
func (g *costGraph) longestRefChain(order []int) (longest, at int) {
	chain := make([]int, len(g.nodes))
	for k := len(order) - 1; k >= 0; k-- {
		i := order[k]
		g.nodes[i].inPlaceTargets(func(to int, ref bool) {
			c := chain[to]
			if ref {
				c++
			}
			chain[i] = max(chain[i], c)
		})
		if chain[i] > longest {
			longest, at = chain[i], i
		}
	}
	return longest, at
}

// perDepth sums weight over the evaluations one payload value at each depth
// may get, from the root schema. At depth 0 a node costs its weight and its
// in-place subschemas'; deeper, what its children subschemas cost one depth
// up, for a parent that is an array (K = a) or an object (K = o):
//
//	cost_0(i)   = weight(i) + Σ_{in-place c} cost_0(c)
//	cost_d^K(i) = max_{c ∈ one_K(i)} cost_{d-1}(c) + Σ_{c ∈ all_K(i)} cost_{d-1}(c) + Σ_{in-place c} cost_d^K(c)
//	cost_d(i)   = max(cost_d^a(i), cost_d^o(i))
//
// (a dynamic reference counts as its most costly target).
//
// An upper bound for any value: its parent is of one kind, the same for
// every subschema applied to it.
func (g *costGraph) perDepth(order []int, weight func(costNode) int64) []int64 {
	out := make([]int64, MaxPayloadDepth+1)
	prev := make([]int64, len(g.nodes))
	arrays := make([]int64, len(g.nodes))
	objects := make([]int64, len(g.nodes))
	cur := make([]int64, len(g.nodes))
	child := func(one, all []int) int64 {
		var best, sum int64
		for _, c := range one {
			best = max(best, prev[c])
		}
		for _, c := range all {
			sum = satAdd(sum, prev[c])
		}
		return satAdd(best, sum)
	}
	for d := range out {
		for k := len(order) - 1; k >= 0; k-- {
			i := order[k]
			n := &g.nodes[i]
			if d == 0 {
				cur[i] = satAdd(weight(*n), n.inPlaceCost(cur))
				continue
			}
			a := satAdd(child(n.arrayOne, n.arrayAll), n.inPlaceCost(arrays))
			o := satAdd(child(n.objectOne, n.objectAll), n.inPlaceCost(objects))
			arrays[i], objects[i], cur[i] = a, o, max(a, o)
		}
		out[d] = cur[0]
		prev, cur = cur, prev
	}
	return out
}

// payloadCost estimates the ticks of checking a payload of this shape:
// each value at depth d costs ticks[d]·(1 + d/8), as the validator copies
// the value's path into each error, and as much again for each of its
// children (it walks an object's members and an array's items at each
// evaluation), perNumber[d] more if it is a number, and perByte[d] for each
// of its bytes, and perKey[d] for each byte of its member names.
func (c schemaCost) payloadCost(p payloadShape) int64 {
	var total int64
	for d := range p.values {
		if d >= len(c.ticks) {
			break
		}
		n := p.values[d]
		if d+1 < len(p.values) {
			n += p.values[d+1]
		}
		ticks := satMul(c.ticks[d], int64(8+d)) / 8
		total = satAdd(total, satMul(ticks, n))
		total = satAdd(total, satMul(c.perNumber[d], p.numbers[d]))
		total = satAdd(total, satMul(c.perByte[d], p.bytes[d]))
		total = satAdd(total, satMul(c.perKey[d], p.keyBytes[d]))
	}
	return total
}
