package apptest

import (
	"bufio"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// Sample is one line of the Prometheus text format.
type Sample struct {
	Name   string
	Labels map[string]string
	Value  float64
}

func (s Sample) String() string { return fmt.Sprintf("%s%v %v", s.Name, s.Labels, s.Value) }

// Scrape reads /metrics and checks it is the Prometheus text format.
func Scrape(t testing.TB, base string) []Sample {
	t.Helper()
	resp, err := get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain; version=0.0.4") {
		t.Fatalf("GET /metrics: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var out []Sample
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		s := Sample{Labels: map[string]string{}}
		series, value, ok := strings.Cut(line, " ")
		if i := strings.IndexByte(line, '}'); i >= 0 {
			series, value, ok = line[:i+1], strings.TrimSpace(line[i+1:]), true
		}
		if !ok {
			t.Fatalf("malformed line %q", line)
		}
		name, labels, hasLabels := strings.Cut(series, "{")
		s.Name = name
		if hasLabels {
			for _, pair := range splitLabels(strings.TrimSuffix(labels, "}")) {
				k, v, _ := strings.Cut(pair, "=")
				uq, err := strconv.Unquote(v)
				if err != nil {
					t.Fatalf("label %q of %q: %v", pair, line, err)
				}
				s.Labels[k] = uq
			}
		}
		if s.Value, err = strconv.ParseFloat(value, 64); err != nil {
			t.Fatalf("value of %q: %v", line, err)
		}
		out = append(out, s)
	}
	return out
}

// splitLabels splits k="v",k2="v2" at the commas outside quotes.
func splitLabels(s string) []string {
	var out []string
	inQuote, start := false, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '"':
			inQuote = !inQuote
		case ',':
			if !inQuote {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

// Sum adds the samples of name whose labels include want (k, v pairs).
func Sum(samples []Sample, name string, want ...string) float64 {
	var total float64
next:
	for _, s := range samples {
		if s.Name != name {
			continue
		}
		for i := 0; i+1 < len(want); i += 2 {
			if s.Labels[want[i]] != want[i+1] {
				continue next
			}
		}
		total += s.Value
	}
	return total
}
