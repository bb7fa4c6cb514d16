// Package promtext reads values from a /metrics page in the Prometheus text
// format, for the benchmark and fault tools that watch the service's
// processes.
package promtext

import (
	"strconv"
	"strings"
)

// Value sums the samples of metric name, in the Prometheus text
// format, whose labels include every pair of want; false when none does.
func Value(text []byte, name string, want map[string]string) (float64, bool) {
	sum, found := 0.0, false
	for line := range strings.SplitSeq(string(text), "\n") {
		rest, ok := strings.CutPrefix(line, name)
		if !ok {
			continue
		}
		var labels map[string]string
		switch {
		case strings.HasPrefix(rest, "{"):
			end := strings.LastIndexByte(rest, '}')
			if end < 0 {
				continue
			}
			if labels, ok = parseLabels(rest[1:end]); !ok {
				continue
			}
			rest = rest[end+1:]
		case strings.HasPrefix(rest, " "):
		default:
			continue // another metric whose name starts with name
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			continue
		}
		match := true
		for k, w := range want {
			if labels[k] != w {
				match = false
				break
			}
		}
		if match {
			sum, found = sum+v, true
		}
	}
	return sum, found
}

// parseLabels parses `a="x",b="y"` (values quoted as Go quotes them, which
// is the text format's escaping).
func parseLabels(s string) (map[string]string, bool) {
	out := map[string]string{}
	for s != "" {
		k, rest, ok := strings.Cut(s, "=")
		if !ok {
			return nil, false
		}
		q, err := strconv.QuotedPrefix(rest)
		if err != nil {
			return nil, false
		}
		v, err := strconv.Unquote(q)
		if err != nil {
			return nil, false
		}
		out[strings.TrimSpace(k)] = v
		s = strings.TrimPrefix(strings.TrimSpace(rest[len(q):]), ",")
	}
	return out, true
}
