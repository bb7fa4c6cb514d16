package api

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"
)

// checkJSON walks body once and refuses what encoding/json lets through but
// this API does not take, as I-JSON (RFC 7493) does: a member name repeated in
// one object (encoding/json would keep the last value and drop the others
// unseen) and a string that is not UTF-8 (encoding/json would replace the bad
// bytes, so the value stored would not be the one sent). Each refusal names
// the member. Syntax errors are left to the decoder, which reports them with
// their offset: checkJSON returns nil when it meets one.
func checkJSON(body []byte) *ValidationError {
	s := jsonScan{b: body}
	return s.run()
}

// jsonScan is checkJSON's state. It keeps its own stack rather than
// recursing, so that deep nesting costs memory in proportion to the body
// (bounded by the body limit) and never the goroutine's stack.
type jsonScan struct {
	b     []byte
	i     int
	stack []jsonFrame
	err   *ValidationError // the refusal, when the scan stopped on one
}

// jsonFrame is one open object or array.
type jsonFrame struct {
	object bool
	index  int    // array: the element being read
	name   []byte // object: the name of the member being read
	// names are the members' names read so far (decoded where they hold an
	// escape, so that "a" and "\u0061" are one name); a map takes over from
	// the slice past smallObject names.
	names [][]byte
	set   map[string]struct{}
}

const smallObject = 16

func (s *jsonScan) run() *ValidationError {
	needValue := true
	for {
		if needValue {
			opened, ok := s.value()
			if !ok {
				return s.err
			}
			needValue = opened
			continue
		}
		if len(s.stack) == 0 {
			return nil // trailing data is the decoder's to report
		}
		top := &s.stack[len(s.stack)-1]
		s.space()
		if s.i >= len(s.b) {
			return nil
		}
		switch c := s.b[s.i]; {
		case c == ',':
			s.i++
			if top.object && !s.member(top) {
				return s.err
			}
			if !top.object {
				top.index++
			}
			needValue = true
		case c == '}' && top.object, c == ']' && !top.object:
			s.i++
			s.stack = s.stack[:len(s.stack)-1]
		default:
			return nil // a syntax error: the decoder says where
		}
	}
}

// value reads a scalar, or opens an object or array: it pushes its frame
// (with the first member's name, for an object) and reports opened, so
// that the first value is read next; an empty one is read whole. ok is false
// when the scan must stop: on a refusal (in s.err) or a syntax error (s.err
// nil).
func (s *jsonScan) value() (opened, ok bool) {
	s.space()
	if s.i >= len(s.b) {
		return false, false
	}
	switch s.b[s.i] {
	case '{':
		s.i++
		s.space()
		if s.i < len(s.b) && s.b[s.i] == '}' {
			s.i++
			return false, true
		}
		s.stack = append(s.stack, jsonFrame{object: true})
		return true, s.member(&s.stack[len(s.stack)-1])
	case '[':
		s.i++
		s.space()
		if s.i < len(s.b) && s.b[s.i] == ']' {
			s.i++
			return false, true
		}
		s.stack = append(s.stack, jsonFrame{})
		return true, true
	case '"':
		raw, ok := s.str()
		if ok && !utf8.Valid(raw) {
			s.refuse("is not valid UTF-8: JSON text must be UTF-8")
			return false, false
		}
		return false, ok
	default:
		// A number or a literal: the decoder checks it.
		start := s.i
		for s.i < len(s.b) && strings.IndexByte(",]} \t\r\n", s.b[s.i]) < 0 {
			s.i++
		}
		return false, s.i > start
	}
}

// member reads a member's name and its colon into top, refusing a name the
// object already has.
func (s *jsonScan) member(top *jsonFrame) bool {
	s.space()
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return false
	}
	raw, ok := s.str()
	if !ok {
		return false
	}
	if !utf8.Valid(raw) {
		top.name = nil
		s.refuse("has a member name that is not valid UTF-8: JSON text must be UTF-8")
		return false
	}
	name := raw
	if bytes.IndexByte(raw, '\\') >= 0 {
		var decoded string
		if json.Unmarshal(s.b[s.i-len(raw)-2:s.i], &decoded) != nil {
			return false
		}
		name = []byte(decoded)
	}
	top.name = name
	if top.has(name) {
		s.refuse("appears twice in its object: a member name may be given once")
		return false
	}
	s.space()
	if s.i >= len(s.b) || s.b[s.i] != ':' {
		return false
	}
	s.i++
	return true
}

// has reports whether the frame's object already has name, and records it.
func (f *jsonFrame) has(name []byte) bool {
	if f.set != nil {
		if _, dup := f.set[string(name)]; dup {
			return true
		}
		f.set[string(name)] = struct{}{}
		return false
	}
	for _, n := range f.names {
		if bytes.Equal(n, name) {
			return true
		}
	}
	f.names = append(f.names, name)
	if len(f.names) > smallObject {
		f.set = make(map[string]struct{}, 2*len(f.names))
		for _, n := range f.names {
			f.set[string(n)] = struct{}{}
		}
		f.names = nil
	}
	return false
}

// str reads a string and returns what is between its quotes.
func (s *jsonScan) str() ([]byte, bool) {
	start := s.i + 1
	for j := start; j < len(s.b); j++ {
		switch s.b[j] {
		case '\\':
			j++
		case '"':
			s.i = j + 1
			return s.b[start:j], true
		}
	}
	return nil, false
}

func (s *jsonScan) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\r', '\n':
			s.i++
		default:
			return
		}
	}
}

// refuse records a refusal of the value being read: the path of the open
// frames names it.
func (s *jsonScan) refuse(message string) {
	var field, pointer strings.Builder
	for _, f := range s.stack {
		switch {
		case !f.object:
			field.WriteString("[" + strconv.Itoa(f.index) + "]")
			pointer.WriteString("/" + strconv.Itoa(f.index))
		case f.name != nil:
			if field.Len() > 0 {
				field.WriteByte('.')
			}
			field.Write(f.name)
			pointer.WriteByte('/')
			pointer.WriteString(pointerEscaper.Replace(string(f.name)))
		}
	}
	name := field.String()
	if name == "" || name[0] == '[' {
		name = "body" + name
	}
	s.err = &ValidationError{Fields: []FieldError{{Field: name, Pointer: pointer.String(), Message: message}}}
}

// pointerEscaper escapes a reference token of an RFC 6901 JSON pointer.
var pointerEscaper = strings.NewReplacer("~", "~0", "/", "~1")
