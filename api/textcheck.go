package api

import (
	"bytes"
	"reflect"
	"strconv"
	"strings"
)

// nulEscape is how a NUL character appears in JSON text, which cannot hold
// one raw.
var nulEscape = []byte(`\u0000`)

// checkText refuses a NUL character in any string of v (a decoded request),
// naming its field: no text field of this API means one, and PostgreSQL's
// text cannot store one, so refusing it here answers alike on both
// databases. Raw JSON fields (json.RawMessage: payloads, schemas) keep theirs:
// they are stored as the JSON text, where it is the escape \u0000.
func checkText(v any) *ValidationError {
	var w textWalk
	w.walk(reflect.ValueOf(v), "")
	return w.err
}

// wrapper is a field type that holds its value in a field of its own
// (Nullable): the walk looks through it.
type wrapper interface{ wrapped() any }

func (n Nullable[T]) wrapped() any { return n.Value }

type textWalk struct{ err *ValidationError }

func (w *textWalk) walk(v reflect.Value, path string) {
	if w.err != nil || !v.IsValid() {
		return
	}
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			w.walk(v.Elem(), path)
		}
	case reflect.String:
		if strings.IndexByte(v.String(), 0) >= 0 {
			w.refuse(path, "must not contain the NUL character (\\u0000)")
		}
	case reflect.Slice, reflect.Array:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return // raw JSON or bytes
		}
		for i := range v.Len() {
			w.walk(v.Index(i), path+"["+strconv.Itoa(i)+"]")
		}
	case reflect.Map:
		iter := v.MapRange()
		for iter.Next() {
			if k := iter.Key(); k.Kind() == reflect.String && strings.IndexByte(k.String(), 0) >= 0 {
				w.refuse(path, "must not have a key with the NUL character (\\u0000)")
				return
			}
			w.walk(iter.Value(), join(path, iter.Key().String()))
		}
	case reflect.Struct:
		if v.CanInterface() {
			if x, ok := v.Interface().(wrapper); ok {
				w.walk(reflect.ValueOf(x.wrapped()), path)
				return
			}
		}
		t := v.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			switch {
			case !f.IsExported() || name == "-":
				continue
			case f.Anonymous && name == "":
				w.walk(v.Field(i), path)
				continue
			case name == "":
				name = f.Name
			}
			w.walk(v.Field(i), join(path, name))
		}
	}
}

func (w *textWalk) refuse(path, message string) {
	if path == "" || path[0] == '[' {
		path = "body" + path
	}
	w.err = &ValidationError{Fields: []FieldError{{Field: path, Message: message}}}
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// mayHoldNUL reports whether body may decode to a string holding NUL: only
// then is the decoded value walked.
func mayHoldNUL(body []byte) bool { return bytes.Contains(body, nulEscape) }
