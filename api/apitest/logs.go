package apitest

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
)

// LogRecorder is a slog.Handler keeping every record, at every level, for
// tests of what a component logs.
type LogRecorder struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (*LogRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (h *LogRecorder) WithAttrs([]slog.Attr) slog.Handler     { return h }
func (h *LogRecorder) WithGroup(string) slog.Handler          { return h }

func (h *LogRecorder) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r.Clone())
	return nil
}

// Lines returns the records with message msg, and their attributes by key.
func (h *LogRecorder) Lines(msg string) ([]slog.Record, []map[string]string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var recs []slog.Record
	var attrs []map[string]string
	for _, r := range h.recs {
		if r.Message == msg {
			recs, attrs = append(recs, r), append(attrs, attrsOf(r))
		}
	}
	return recs, attrs
}

// Text is every record written out, a line each ("LEVEL message key=value
// …"), for looking for what must not be there.
func (h *LogRecorder) Text() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return text(h.recs)
}

// Take returns the records so far, their attributes by key and their text,
// and forgets them.
func (h *LogRecorder) Take() ([]slog.Record, []map[string]string, string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	recs := h.recs
	h.recs = nil
	attrs := make([]map[string]string, len(recs))
	for i, r := range recs {
		attrs[i] = attrsOf(r)
	}
	return recs, attrs, text(recs)
}

func attrsOf(r slog.Record) map[string]string {
	m := map[string]string{}
	r.Attrs(func(a slog.Attr) bool { m[a.Key] = a.Value.String(); return true })
	return m
}

func text(recs []slog.Record) string {
	var b strings.Builder
	for _, r := range recs {
		fmt.Fprintf(&b, "%s %s", r.Level, r.Message)
		r.Attrs(func(a slog.Attr) bool { fmt.Fprintf(&b, " %s=%s", a.Key, a.Value); return true })
		b.WriteByte('\n')
	}
	return b.String()
}
