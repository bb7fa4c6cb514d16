package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"
)

// choice is a flag that takes one of a few words.
type choice struct {
	value   string
	allowed []string
}

func (c *choice) String() string { return c.value }
func (c *choice) Type() string   { return strings.Join(c.allowed, "|") }
func (c *choice) Set(v string) error {
	for _, a := range c.allowed {
		if strings.EqualFold(v, a) {
			c.value = a
			return nil
		}
	}
	return fmt.Errorf("must be one of %s", strings.Join(c.allowed, ", "))
}

// newChoice is a choice of allowed with the default def ("" for none).
func newChoice(def string, allowed ...string) *choice {
	return &choice{value: def, allowed: slices.Clone(allowed)}
}

// timeFlag is a point in time: RFC 3339, or a duration back from now.
type timeFlag struct {
	t   time.Time
	now func() time.Time
}

func (f *timeFlag) String() string {
	if f.t.IsZero() {
		return ""
	}
	return f.t.Format(time.RFC3339)
}

func (f *timeFlag) Type() string { return "time" }

func (f *timeFlag) Set(v string) error {
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		f.t = t
		return nil
	}
	d, err := time.ParseDuration(strings.TrimSuffix(strings.TrimSpace(v), " ago"))
	if err != nil || d < 0 {
		return fmt.Errorf("must be an RFC 3339 time (2026-01-02T22:00:00Z) or a duration back from now (90m, 24h)")
	}
	f.t = f.now().Add(-d).UTC().Truncate(time.Millisecond)
	return nil
}

// ptr returns the time, or nil when the flag was not given.
func (f *timeFlag) ptr() *time.Time {
	if f.t.IsZero() {
		return nil
	}
	t := f.t
	return &t
}

// input reads what a flag names: the file, or standard input for "-".
func (a *cli) input(name string) ([]byte, error) {
	var (
		raw []byte
		err error
	)
	if name == "-" {
		raw, err = io.ReadAll(a.in)
	} else {
		raw, err = os.ReadFile(name)
	}
	if err != nil {
		return nil, usagef("read %s: %v", name, err)
	}
	return raw, nil
}

// jsonInput is the JSON document given inline or in a file ("-": standard
// input), whichever the flags name; inlineFlag and fileFlag name them in
// errors. ok is false when neither was given.
func (a *cli) jsonInput(inline, file, inlineFlag, fileFlag string) (doc json.RawMessage, ok bool, err error) {
	switch {
	case inline != "" && file != "":
		return nil, false, usagef("give --%s or --%s, not both", inlineFlag, fileFlag)
	case inline != "":
		doc = json.RawMessage(inline)
	case file != "":
		raw, err := a.input(file)
		if err != nil {
			return nil, false, err
		}
		doc = json.RawMessage(bytes.TrimSpace(raw))
	default:
		return nil, false, nil
	}
	if !json.Valid(doc) {
		from := "--" + inlineFlag
		if file != "" {
			from = "--" + fileFlag + " " + file
		}
		return nil, false, usagef("%s is not JSON", from)
	}
	return doc, true, nil
}

// decodeStrict decodes a JSON document into v, refusing unknown fields, so
// that a misspelt field in a body file is caught before it is sent.
func decodeStrict(doc []byte, v any, from string) error {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return usagef("%s: %v", from, err)
	}
	return nil
}
