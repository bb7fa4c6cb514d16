package app

import (
	"os"
	"strings"
	"testing"
)

// TestOperationsDocCoversSettings: docs/operations.md documents every
// setting with its flag and default.
func TestOperationsDocCoversSettings(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{}
	for line := range strings.SplitSeq(string(raw), "\n") {
		if cells := strings.Split(line, "|"); len(cells) > 4 && strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			rows[strings.Trim(strings.TrimSpace(cells[1]), "`")] = line
		}
	}
	for _, s := range settings {
		row, ok := rows[s.env]
		if !ok {
			t.Errorf("%s is not in the configuration reference of docs/operations.md", s.env)
			continue
		}
		if !strings.Contains(row, "`-"+s.flag+"`") {
			t.Errorf("%s: flag -%s missing from its row", s.env, s.flag)
		}
		def := "`" + s.def + "`"
		if s.def == "" {
			def = "(empty)"
		}
		if !strings.Contains(row, def) {
			t.Errorf("%s: default %s missing from its row", s.env, def)
		}
	}
}

// TestOperationsDocCoversTracing: docs/operations.md lists every OTEL_*
// variable the service reads itself.
func TestOperationsDocCoversTracing(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(raw), "### Tracing (OpenTelemetry)")
	for _, v := range TracingVariables {
		if !strings.Contains(section, "| `"+v+"`") && !strings.Contains(section, ", `"+v+"` |") {
			t.Errorf("%s is not in the tracing table of docs/operations.md", v)
		}
	}
}
