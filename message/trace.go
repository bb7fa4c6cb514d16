package message

import (
	"encoding/binary"
	"encoding/hex"
	"regexp"
	"strings"

	"go.opentelemetry.io/otel/trace"
)

// W3C Trace Context (https://www.w3.org/TR/trace-context/) headers, used on
// the publish request, as broker message headers and on push requests.
const (
	HeaderTraceparent = "traceparent"
	HeaderTracestate  = "tracestate"
)

// Trace is the W3C trace context an event carries from its publish to every
// delivery: Parent is a valid traceparent (the publisher's, or one this
// service started), State the tracestate that came with it ("" if none).
type Trace struct {
	Parent string
	State  string
}

const (
	maxTracestateMembers = 32
	// maxTracestate is the length the spec asks every vendor to propagate.
	maxTracestate = 512
)

var (
	hex2  = regexp.MustCompile(`^[0-9a-f]{2}$`)
	hex32 = regexp.MustCompile(`^[0-9a-f]{32}$`)
	hex16 = regexp.MustCompile(`^[0-9a-f]{16}$`)
	// tracestate list members (§3.3.1): key = simple-key / tenant@system.
	stateKey   = regexp.MustCompile(`^(?:[a-z0-9][_0-9a-z\-*/]{0,255}|[a-z0-9][_0-9a-z\-*/]{0,240}@[a-z][_0-9a-z\-*/]{0,13})$`)
	stateValue = regexp.MustCompile(`^[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]$`)
)

// ParseTraceparent validates a traceparent header (§3.2) and returns it in
// its version-00 form. A future version is accepted by its first four
// fields (the spec's forward-compatibility rule); version ff, wrong lengths,
// upper-case hex and all-zero ids are invalid.
func ParseTraceparent(v string) (string, bool) {
	v = strings.TrimSpace(v)
	if len(v) < 55 {
		return "", false
	}
	version := v[:2]
	if !hex2.MatchString(version) || version == "ff" {
		return "", false
	}
	if version == "00" && len(v) != 55 {
		return "", false
	}
	if len(v) > 55 && v[55] != '-' {
		return "", false
	}
	if v[2] != '-' || v[35] != '-' || v[52] != '-' {
		return "", false
	}
	traceID, parentID, flags := v[3:35], v[36:52], v[53:55]
	if !hex32.MatchString(traceID) || traceID == strings.Repeat("0", 32) ||
		!hex16.MatchString(parentID) || parentID == strings.Repeat("0", 16) || !hex2.MatchString(flags) {
		return "", false
	}
	if version != "00" {
		// Only the sampled bit is defined for version 00.
		b, _ := hex.DecodeString(flags)
		flags = hex.EncodeToString([]byte{b[0] & 1})
	}
	return "00-" + traceID + "-" + parentID + "-" + flags, true
}

// ParseTracestate validates a tracestate (the comma-joined values of every
// tracestate header) and returns it normalised, or "" when it is invalid or
// empty (§3.3: an invalid tracestate is discarded, the traceparent kept).
// Longer than 512 characters, members longer than 128 go first, then members
// from the end (§3.3.1.5).
func ParseTracestate(v string) string {
	var members []string
	seen := map[string]bool{}
	for m := range strings.SplitSeq(v, ",") {
		m = strings.Trim(m, " \t")
		if m == "" {
			continue // empty members are allowed and dropped
		}
		key, value, ok := strings.Cut(m, "=")
		if !ok || !stateKey.MatchString(key) || !stateValue.MatchString(value) || seen[key] {
			return ""
		}
		seen[key] = true
		members = append(members, m)
	}
	if len(members) > maxTracestateMembers {
		return ""
	}
	length := func() int { return len(strings.Join(members, ",")) }
	for i := 0; i < len(members) && length() > maxTracestate; {
		if len(members[i]) > 128 {
			members = append(members[:i], members[i+1:]...)
			continue
		}
		i++
	}
	for len(members) > 0 && length() > maxTracestate {
		members = members[:len(members)-1]
	}
	return strings.Join(members, ",")
}

// TraceFrom returns the trace context of a publish request: its valid
// traceparent (with tracestate), or else a new trace started here, its
// parent id standing for the publish (§4.3: a vendor that cannot parse
// traceparent starts a new trace and ignores tracestate). random returns
// uniform 64-bit values.
func TraceFrom(traceparent string, tracestate []string, random func() uint64) Trace {
	if tp, ok := ParseTraceparent(traceparent); ok {
		return Trace{Parent: tp, State: ParseTracestate(strings.Join(tracestate, ","))}
	}
	var id [16]byte
	binary.BigEndian.PutUint64(id[:8], random())
	binary.BigEndian.PutUint64(id[8:], random()|1) // never all zero
	return Trace{Parent: "00-" + hex.EncodeToString(id[:]) + "-" + spanID(random) + "-00"}
}

// Child returns the traceparent of a new span under t: the same trace id and
// flags with a new parent id, as each push attempt sends. "" stays "".
func (t Trace) Child(random func() uint64) string {
	if len(t.Parent) != 55 {
		return t.Parent
	}
	return t.Parent[:36] + spanID(random) + t.Parent[52:]
}

// TraceID is the trace id of t, for logs; "" if none.
func (t Trace) TraceID() string {
	if len(t.Parent) != 55 {
		return ""
	}
	return t.Parent[3:35]
}

func spanID(random func() uint64) string {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], random()|1<<63) // never all zero
	return hex.EncodeToString(b[:])
}

// SpanContext is t as an OpenTelemetry span context, marked remote (it came
// with a request or a message); invalid when t has no valid traceparent.
func (t Trace) SpanContext() trace.SpanContext {
	if len(t.Parent) != 55 {
		return trace.SpanContext{}
	}
	tid, err := trace.TraceIDFromHex(t.Parent[3:35])
	if err != nil {
		return trace.SpanContext{}
	}
	sid, err := trace.SpanIDFromHex(t.Parent[36:52])
	if err != nil {
		return trace.SpanContext{}
	}
	flags, err := hex.DecodeString(t.Parent[53:55])
	if err != nil {
		return trace.SpanContext{}
	}
	cfg := trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.TraceFlags(flags[0]) & trace.FlagsSampled, Remote: true}
	if t.State != "" {
		cfg.TraceState, _ = trace.ParseTraceState(t.State) // ParseTracestate checked it
	}
	return trace.NewSpanContext(cfg)
}

// TraceOf is the W3C trace context that names the span of sc: what a copy
// carries or a push request sends for it. An invalid sc gives the zero Trace.
func TraceOf(sc trace.SpanContext) Trace {
	if !sc.IsValid() {
		return Trace{}
	}
	flags := "00"
	if sc.IsSampled() {
		flags = "01"
	}
	return Trace{Parent: "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-" + flags, State: sc.TraceState().String()}
}
