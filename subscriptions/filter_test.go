package subscriptions_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/roomhub/messaging-api/api"
	"github.com/roomhub/messaging-api/subscriptions"
)

// compile parses filter, failing the test on a problem.
func compile(t *testing.T, filter string) *subscriptions.AttributeFilter {
	t.Helper()
	var probs api.Problems
	f := subscriptions.ParseAttributeFilter(json.RawMessage(filter), &probs)
	if err := probs.Err(); err != nil {
		t.Fatalf("%s: %v", filter, err)
	}
	return f
}

// TestAttributeFilterMatches: keys are ANDed, the conditions of one key
// ORed; every operator on present, absent, numeric and non-numeric values.
func TestAttributeFilterMatches(t *testing.T) {
	t.Parallel()
	attrs := func(kv ...string) map[string]string {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	for _, tc := range []struct {
		filter string
		yes    []map[string]string
		no     []map[string]string
	}{
		{`{"region":["eu","us"]}`,
			[]map[string]string{attrs("region", "eu"), attrs("region", "us", "x", "y")},
			[]map[string]string{attrs("region", "EU"), attrs("region", "asia"), attrs(), attrs("regio", "eu")}},
		{`{"region":["eu"],"tier":["gold"]}`,
			[]map[string]string{attrs("region", "eu", "tier", "gold")},
			[]map[string]string{attrs("region", "eu"), attrs("tier", "gold"), attrs("region", "eu", "tier", "free")}},
		{`{"source":[{"prefix":"web-"}]}`,
			[]map[string]string{attrs("source", "web-1"), attrs("source", "web-")},
			[]map[string]string{attrs("source", "web"), attrs("source", "app-web-1"), attrs()}},
		{`{"traceId":[{"exists":true}]}`,
			[]map[string]string{attrs("traceId", "x"), attrs("traceId", "")},
			[]map[string]string{attrs(), attrs("traceid", "x")}},
		{`{"traceId":[{"exists":false}]}`,
			[]map[string]string{attrs(), attrs("other", "1")},
			[]map[string]string{attrs("traceId", "")}},
		{`{"tier":[{"anything-but":["free","trial"]}]}`,
			[]map[string]string{attrs("tier", "gold"), attrs("tier", "")},
			[]map[string]string{attrs("tier", "free"), attrs("tier", "trial"), attrs()}},
		{`{"tier":[{"anything-but":"free"}]}`,
			[]map[string]string{attrs("tier", "gold")},
			[]map[string]string{attrs("tier", "free"), attrs()}},
		{`{"source":[{"anything-but":{"prefix":"test-"}}]}`,
			[]map[string]string{attrs("source", "web-1"), attrs("source", "test")},
			[]map[string]string{attrs("source", "test-1"), attrs()}},
		{`{"priority":[{"numeric":[">=",5]}]}`,
			[]map[string]string{attrs("priority", "5"), attrs("priority", "5.0"), attrs("priority", "1e3"), attrs("priority", "007")},
			[]map[string]string{attrs("priority", "4.999"), attrs("priority", "high"), attrs("priority", " 5"), attrs("priority", "+5"),
				attrs("priority", "0x10"), attrs("priority", "NaN"), attrs("priority", "Inf"), attrs("priority", "1e400"), attrs("priority", ""), attrs()}},
		{`{"priority":[{"numeric":[">",0,"<=",5]}]}`,
			[]map[string]string{attrs("priority", "0.001"), attrs("priority", "5")},
			[]map[string]string{attrs("priority", "0"), attrs("priority", "5.01"), attrs("priority", "-1")}},
		{`{"priority":[{"numeric":["<=",5,">",0]}]}`, // bounds in either order
			[]map[string]string{attrs("priority", "3")},
			[]map[string]string{attrs("priority", "0"), attrs("priority", "6")}},
		{`{"priority":[{"numeric":["=",2.5]}]}`,
			[]map[string]string{attrs("priority", "2.5"), attrs("priority", "2.50"), attrs("priority", "25e-1")},
			[]map[string]string{attrs("priority", "2.51")}},
		{`{"priority":[{"numeric":["<",0]},{"numeric":[">",100]},"urgent"]}`,
			[]map[string]string{attrs("priority", "-1"), attrs("priority", "101"), attrs("priority", "urgent")},
			[]map[string]string{attrs("priority", "50"), attrs("priority", "Urgent")}},
		{`{"traceId":[{"exists":false},"x"]}`,
			[]map[string]string{attrs(), attrs("traceId", "x")},
			[]map[string]string{attrs("traceId", "y")}},
		{`{"region":["eu","us"],"priority":[{"numeric":[">=",5]}],"source":[{"prefix":"web-"}],"traceId":[{"exists":true}],"tier":[{"anything-but":["free"]}]}`,
			[]map[string]string{attrs("region", "eu", "priority", "7", "source", "web-a", "traceId", "t", "tier", "gold")},
			[]map[string]string{attrs("region", "eu", "priority", "7", "source", "web-a", "traceId", "t", "tier", "free"),
				attrs("region", "eu", "priority", "7", "source", "web-a", "tier", "gold")}},
	} {
		f := compile(t, tc.filter)
		for _, a := range tc.yes {
			if !f.Matches(a) {
				t.Errorf("%s does not match %v, want a match", tc.filter, a)
			}
		}
		for _, a := range tc.no {
			if f.Matches(a) {
				t.Errorf("%s matches %v, want none", tc.filter, a)
			}
		}
	}
	var none *subscriptions.AttributeFilter
	if !none.Matches(nil) || compile(t, `{}`) != nil || compile(t, `null`) != nil {
		t.Error("no filter (nil, {} or null) must match every event")
	}
}

// TestAttributeFilterCanonical: the filter is answered and stored in one
// form whatever its spelling, and reloads as the same filter.
func TestAttributeFilterCanonical(t *testing.T) {
	t.Parallel()
	f := compile(t, `{ "tier": [{"anything-but": "free"}], "priority": [{"numeric": [">", 1e0, "<=", 5.50]}, "<b>&"], "a": [{"exists": false}] }`)
	want := `{"a":[{"exists":false}],"priority":[{"numeric":[">",1,"<=",5.5]},"<b>&"],"tier":[{"anything-but":["free"]}]}`
	if got := f.Text(); got != want {
		t.Fatalf("canonical form %s, want %s", got, want)
	}
	if again := subscriptions.LoadAttributeFilter(f.Text()); again.Text() != want || !again.Matches(map[string]string{"priority": "3", "tier": "x"}) {
		t.Errorf("reloaded filter %s does not behave as the original", again.Text())
	}
	// PostgreSQL's JSONB answers another spelling; it loads as the same filter.
	if again := subscriptions.LoadAttributeFilter(`{"a": [{"exists": false}], "tier": [{"anything-but": ["free"]}], "priority": [{"numeric": [">", 1, "<=", 5.50]}, "<b>&"]}`); again.Text() != want {
		t.Errorf("JSONB's spelling loads as %s, want %s", again.Text(), want)
	}
	broken := subscriptions.LoadAttributeFilter(`{"a":[{"numeric":[">",5,"<",1]}]}`)
	if broken.Matches(map[string]string{"a": "3"}) || broken.Matches(nil) {
		t.Error("a stored filter that no longer compiles must match nothing")
	}
}

// TestAttributeFilterProblems: each bad part is named by its JSON pointer,
// and the bounds are checked before the conditions.
func TestAttributeFilterProblems(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		filter, pointer, message string
	}{
		{`[]`, "/attributeFilter", "must be an object"},
		{`"region"`, "/attributeFilter", "must be an object"},
		{`{"a":["1"],"b":["1"],"c":["1"],"d":["1"],"e":["1"],"f":["1"]}`, "/attributeFilter", "names 6 attributes, more than the 5"},
		{`{"a":[` + strings.Repeat(`"x",`, 100) + `"x"]}`, "/attributeFilter/a", "has 101 conditions"},
		{`{"a":[{"anything-but":[` + strings.Repeat(`"x",`, 100) + `"x"]}]}`, "/attributeFilter/a", "has 101 conditions"},
		{`{"a":[` + strings.Repeat(`"x",`, 79) + `"x"],"b":[` + strings.Repeat(`"x",`, 70) + `"x"]}`, "/attributeFilter", "has 151 conditions, more than the 150"},
		{`{"a":["` + strings.Repeat("x", 1025) + `"]}`, "/attributeFilter/a/0", "longer than any attribute value"},
		{`{"a":["` + strings.Repeat("x", subscriptions.MaxFilterBytes) + `"]}`, "/attributeFilter", "more than the 32768"},
		{`{"1a":["x"]}`, "/attributeFilter/1a", "is not an attribute name"},
		{`{"a/b~c":["x"]}`, "/attributeFilter/a~1b~0c", "is not an attribute name"},
		{`{"a":"x"}`, "/attributeFilter/a", "must be a list of conditions"},
		{`{"a":[]}`, "/attributeFilter/a", "at least one condition"},
		{`{"a":[5]}`, "/attributeFilter/a/0", `write "5" to match that text`},
		{`{"a":[null]}`, "/attributeFilter/a/0", "must be a string (the exact value) or an object with one operator"},
		{`{"a":[["x"]]}`, "/attributeFilter/a/0", "must be a string (the exact value)"},
		{`{"a":[{}]}`, "/attributeFilter/a/0", "one operator"},
		{`{"a":[{"prefix":"x","exists":true}]}`, "/attributeFilter/a/0", "one operator"},
		{`{"a":[{"suffix":"x"}]}`, "/attributeFilter/a/0", `unknown operator "suffix"`},
		{`{"a":[{"prefix":""}]}`, "/attributeFilter/a/0/prefix", "must not be empty"},
		{`{"a":[{"prefix":5}]}`, "/attributeFilter/a/0/prefix", "must be a string"},
		{`{"a":["x\u0000"]}`, "/attributeFilter/a/0", "NUL"},
		{`{"a":[{"exists":"yes"}]}`, "/attributeFilter/a/0/exists", "must be true"},
		{`{"a":[{"anything-but":[]}]}`, "/attributeFilter/a/0/anything-but", "at least one value"},
		{`{"a":[{"anything-but":["x",1]}]}`, "/attributeFilter/a/0/anything-but/1", "must be a string"},
		{`{"a":[{"anything-but":{"suffix":"x"}}]}`, "/attributeFilter/a/0/anything-but", `{"prefix": "…"}`},
		{`{"a":[{"anything-but":{"prefix":""}}]}`, "/attributeFilter/a/0/anything-but/prefix", "must not be empty"},
		{`{"a":[{"numeric":5}]}`, "/attributeFilter/a/0/numeric", "must be [operator, number]"},
		{`{"a":[{"numeric":[">",1,"<"]}]}`, "/attributeFilter/a/0/numeric", "must be [operator, number]"},
		{`{"a":[{"numeric":["!=",1]}]}`, "/attributeFilter/a/0/numeric/0", "must be one of"},
		{`{"priority":[{"numeric":[">=","5"]}]}`, "/attributeFilter/priority/0/numeric/1", "must be a number"},
		{`{"a":[{"numeric":[">=",1e10]}]}`, "/attributeFilter/a/0/numeric/1", "from -1000000000 to 1000000000"},
		{`{"a":[{"numeric":[">",1,">",2]}]}`, "/attributeFilter/a/0/numeric", "one lower bound"},
		{`{"a":[{"numeric":["=",1,"<",2]}]}`, "/attributeFilter/a/0/numeric", `"=" takes no second comparison`},
		{`{"a":[{"numeric":[">",5,"<",1]}]}`, "/attributeFilter/a/0/numeric", "empty range"},
		{`{"a":[{"numeric":[">",5,"<=",5]}]}`, "/attributeFilter/a/0/numeric", "empty range"},
	} {
		var probs api.Problems
		f := subscriptions.ParseAttributeFilter(json.RawMessage(tc.filter), &probs)
		var ve *api.ValidationError
		if f != nil || !errors.As(probs.Err(), &ve) {
			t.Errorf("%.80s: accepted", tc.filter)
			continue
		}
		if !slices.ContainsFunc(ve.Fields, func(fe api.FieldError) bool {
			return fe.Field == "attributeFilter" && fe.Pointer == tc.pointer && strings.Contains(fe.Message, tc.message)
		}) {
			t.Errorf("%.80s: problems %+v, want %s: …%s…", tc.filter, ve.Fields, tc.pointer, tc.message)
		}
	}
	// At the bounds: accepted.
	compile(t, `{"a":[`+strings.Repeat(`"x",`, 99)+`"x"],"b":[`+strings.Repeat(`"x",`, 49)+`"x"]}`)
	compile(t, `{"a":["`+strings.Repeat("x", 1024)+`"],"b":[{"numeric":[">=",-1e9,"<=",1e9]}],"c":["1"],"d":["1"],"e":["1"]}`)
}

// BenchmarkAttributeFilter measures one filter of every operator against
// an event with 8 attributes that it matches (the worst case: no key
// short-cuts the evaluation).
func BenchmarkAttributeFilter(b *testing.B) {
	var probs api.Problems
	f := subscriptions.ParseAttributeFilter(json.RawMessage(`{"region":["eu","us"],"priority":[{"numeric":[">=",5]}],"source":[{"prefix":"web-"}],"traceId":[{"exists":true}],"tier":[{"anything-but":["free"]}]}`), &probs)
	attrs := map[string]string{"region": "us", "priority": "7", "source": "web-2", "traceId": "t", "tier": "gold"}
	for i := range 3 {
		attrs[fmt.Sprintf("extra%d", i)] = "v"
	}
	b.ReportAllocs()
	for b.Loop() {
		if !f.Matches(attrs) {
			b.Fatal("no match")
		}
	}
}

// FuzzAttributeFilter parses any JSON as a filter and matches it against
// attributes made of the rest of the input: never a panic; an accepted
// filter's canonical form is within the bounds and parses to itself, and
// selects the same events.
func FuzzAttributeFilter(f *testing.F) {
	for _, s := range []string{
		`{"region":["eu","us"],"priority":[{"numeric":[">=",5]}],"source":[{"prefix":"web-"}],"traceId":[{"exists":true}],"tier":[{"anything-but":["free"]}]}`,
		`{"priority":[{"numeric":[">",0,"<=",5]}]}`, `{"priority":[{"numeric":["<=",5,">",0]}]}`, `{"p":[{"numeric":["=",-0.5e-3]}]}`,
		`{"p":[{"numeric":[">",5,"<",1]}]}`, `{"p":[{"numeric":["=",1,"<",2]}]}`, `{"p":[{"numeric":[">=",1e10]}]}`, `{"p":[{"numeric":[">="]}]}`,
		`{"t":[{"anything-but":"free"}]}`, `{"t":[{"anything-but":{"prefix":"x"}}]}`, `{"t":[{"anything-but":[]}]}`, `{"t":[{"anything-but":[1]}]}`,
		`{"t":[{"exists":false},"x"]}`, `{"t":[{"prefix":""}]}`, `{"t":[{"suffix":"x"}]}`, `{"t":[{}]}`, `{"t":[{"prefix":"a","exists":true}]}`,
		`{"t":[5]}`, `{"t":[null]}`, `{"t":[["x"]]}`, `{"t":"x"}`, `{"t":[]}`, `{"1t":["x"]}`, `{"a/b~":["x"]}`, `{"t":["\u0000"]}`,
		`{}`, `null`, `[]`, `"x"`, `5`, ``, `{`, `{"a":["1"],"b":["1"],"c":["1"],"d":["1"],"e":["1"],"f":["1"]}`,
		`{"a":[` + strings.Repeat(`"x",`, 150) + `"x"]}`,
	} {
		f.Add([]byte(s), "region=eu;priority=7;source=web-1;tier=gold;t=x;p=0.0005")
	}
	f.Fuzz(func(t *testing.T, filter []byte, attrText string) {
		var probs api.Problems
		parsed := subscriptions.ParseAttributeFilter(filter, &probs)
		attrs := map[string]string{}
		for _, kv := range strings.Split(attrText, ";") {
			k, v, _ := strings.Cut(kv, "=")
			attrs[k] = v
		}
		if probs.Len() > 0 {
			if parsed != nil {
				t.Fatalf("%s: a filter with problems was compiled", filter)
			}
			return
		}
		if parsed == nil {
			return // null or {}: no filter
		}
		text := parsed.Text()
		if len(text) > subscriptions.MaxFilterBytes*2 || !json.Valid([]byte(text)) {
			t.Fatalf("canonical form %q of %s", text, filter)
		}
		var again api.Problems
		reparsed := subscriptions.ParseAttributeFilter(json.RawMessage(text), &again)
		if again.Len() > 0 || reparsed.Text() != text {
			t.Fatalf("canonical form %s of %s parses to %v, %v", text, filter, reparsed, again.Err())
		}
		if parsed.Matches(attrs) != reparsed.Matches(attrs) || parsed.Matches(attrs) != subscriptions.LoadAttributeFilter(text).Matches(attrs) {
			t.Fatalf("%s and its canonical form %s select %v differently", filter, text, attrs)
		}
	})
}
