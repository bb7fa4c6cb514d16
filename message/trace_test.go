package message

import (
	"strings"
	"testing"
)

func TestParseTraceparent(t *testing.T) {
	t.Parallel()
	const valid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	tests := []struct {
		name, in, want string
	}{
		{"valid", valid, valid},
		{"not sampled", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"},
		{"surrounding spaces", " " + valid + "\t", valid},
		{"future version with more fields", "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09-what-the-future-holds", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
		{"future version, exact length", "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"},
		{"empty", "", ""},
		{"version ff", "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", ""},
		{"version 00 with extra", valid + "-00", ""},
		{"future version, no dash after flags", "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x", ""},
		{"upper-case hex", "00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01", ""},
		{"zero trace id", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", ""},
		{"zero parent id", "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", ""},
		{"short trace id", "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01", ""},
		{"bad flags", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g", ""},
		{"wrong separator", "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", ""},
		{"bad version", "0x-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, ok := ParseTraceparent(tt.in)
			if got != tt.want || ok != (tt.want != "") {
				t.Errorf("ParseTraceparent(%q) = %q, %v; want %q", tt.in, got, ok, tt.want)
			}
		})
	}
}

func TestParseTracestate(t *testing.T) {
	t.Parallel()
	long := func(k string, n int) string { return k + "=" + strings.Repeat("v", n) }
	tests := []struct {
		name, in, want string
	}{
		{"one", "congo=t61rcWkgMzE", "congo=t61rcWkgMzE"},
		{"two with spaces and empties", " rojo=00f067aa0ba902b7 ,, congo=t61rcWkgMzE\t", "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"},
		{"tenant key", "fw529a3039@dt=abc", "fw529a3039@dt=abc"},
		{"empty", "", ""},
		{"duplicate key", "a=1,a=2", ""},
		{"upper-case key", "Congo=1", ""},
		{"no equals", "congo", ""},
		{"equals in value", "a=1=2", ""},
		{"value ends in space", "a=1 x ", "a=1 x"},
		{"33 members", strings.Repeat("k=v,", 0) + func() string {
			var b []string
			for i := range 33 {
				b = append(b, string(rune('a'+i%26))+strings.Repeat("x", i/26+1)+"=v")
			}
			return strings.Join(b, ",")
		}(), ""},
		{"over 512: long member goes first", long("a", 100) + "," + long("big", 200) + "," + long("b", 100) + "," + long("c", 100) + "," + long("d", 100),
			long("a", 100) + "," + long("b", 100) + "," + long("c", 100) + "," + long("d", 100)},
		{"over 512: then from the end", long("a", 120) + "," + long("b", 120) + "," + long("c", 120) + "," + long("d", 120) + "," + long("e", 120),
			long("a", 120) + "," + long("b", 120) + "," + long("c", 120) + "," + long("d", 120)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := ParseTracestate(tt.in); got != tt.want {
				t.Errorf("ParseTracestate(%q) = %q; want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestTraceFrom(t *testing.T) {
	t.Parallel()
	seq := func(vals ...uint64) func() uint64 {
		i := 0
		return func() uint64 { v := vals[i%len(vals)]; i++; return v }
	}
	const in = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	tr := TraceFrom(in, []string{"a=1", "b=2"}, seq(1))
	if tr.Parent != in || tr.State != "a=1,b=2" {
		t.Errorf("valid: %+v", tr)
	}
	// A malformed traceparent starts a new trace and drops tracestate.
	tr = TraceFrom("00-bad", []string{"a=1"}, seq(0x0102030405060708, 0x1112131415161718, 0x2122232425262728))
	if tr.Parent != "00-01020304050607081112131415161719-a122232425262728-00" || tr.State != "" {
		t.Errorf("new trace: %+v", tr)
	}
	if _, ok := ParseTraceparent(tr.Parent); !ok {
		t.Errorf("new trace %q is not a valid traceparent", tr.Parent)
	}
	child := Trace{Parent: in}.Child(seq(0x0a0b0c0d0e0f1011))
	if child != "00-4bf92f3577b34da6a3ce929d0e0e4736-8a0b0c0d0e0f1011-01" {
		t.Errorf("child = %q", child)
	}
	if (Trace{}).Child(seq(1)) != "" || (Trace{Parent: in}).TraceID() != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Error("empty trace or trace id")
	}
}

func TestSpanContextRoundTrip(t *testing.T) {
	t.Parallel()
	tests := []Trace{
		{Parent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", State: "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"},
		{Parent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"},
	}
	for _, tr := range tests {
		sc := tr.SpanContext()
		if !sc.IsValid() || !sc.IsRemote() || sc.IsSampled() != strings.HasSuffix(tr.Parent, "-01") {
			t.Errorf("%+v: span context %+v", tr, sc)
		}
		if got := TraceOf(sc); got != tr {
			t.Errorf("TraceOf(%+v.SpanContext()) = %+v", tr, got)
		}
	}
	for _, bad := range []Trace{{}, {Parent: "00-short"}, {Parent: "00-4bf92f3577b34da6a3ce929d0e0e47zz-00f067aa0ba902b7-01"}} {
		if sc := bad.SpanContext(); sc.IsValid() {
			t.Errorf("%+v gave a valid span context", bad)
		}
		if got := TraceOf(bad.SpanContext()); got != (Trace{}) {
			t.Errorf("TraceOf of an invalid span context = %+v", got)
		}
	}
}
