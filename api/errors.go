// Package api holds what every HTTP handler of the service shares: the error
// kinds features wrap their sentinels around, RFC 9457 problem details, strict
// JSON decoding that names the offending field, nullable fields for PATCH, and
// opaque pagination cursors.
package api

import (
	"errors"
	"net/http"
	"strings"
)

// FieldError says what is wrong with one field. Field is a dotted path into the
// request (`eventTypes[0].versions[1]`), or a query or path parameter name.
type FieldError struct {
	Field string `json:"field"`
	// Pointer is the RFC 6901 JSON pointer into the request body of the value
	// at fault, when there is one (schema violations of a payload).
	Pointer string `json:"pointer,omitempty"`
	Message string `json:"message"`
}

// ValidationError lists every problem found in a request (422, or 400 when
// the body is not JSON at all).
type ValidationError struct {
	Status int // 0 means 422
	Fields []FieldError
}

// Unwrap is the error's kind: ErrMalformed for a 400, else ErrValidation.
func (e *ValidationError) Unwrap() error {
	if e.Status == http.StatusBadRequest {
		return ErrMalformed
	}
	return ErrValidation
}

func (e *ValidationError) Error() string {
	parts := make([]string, len(e.Fields))
	for i, f := range e.Fields {
		parts[i] = f.Field + ": " + f.Message
	}
	return "invalid request: " + strings.Join(parts, "; ")
}

// Invalid is a ValidationError about one field.
func Invalid(field, format string) *ValidationError {
	return &ValidationError{Fields: []FieldError{{Field: field, Message: format}}}
}

// FieldCause is an error about one field of the request that keeps the status
// of its cause: a 404 for the event type a batch's third message names, say.
// The problem answer lists the field in errors, as a validation error does.
type FieldCause struct {
	FieldError
	Err error
}

func (e *FieldCause) Error() string { return e.Field + ": " + e.Err.Error() }

// Unwrap makes errors.Is and errors.As see the cause.
func (e *FieldCause) Unwrap() error { return e.Err }

// InField names the request field err is about (pointer, when not empty, is
// its RFC 6901 pointer into the body); nil stays nil.
func InField(field, pointer string, err error) error {
	if err == nil {
		return nil
	}
	return &FieldCause{FieldError: FieldError{Field: field, Pointer: pointer, Message: err.Error()}, Err: err}
}

// Problems collects field errors while a request is validated.
type Problems struct {
	fields []FieldError
}

// Add records a problem with field.
func (p *Problems) Add(field, message string) {
	p.fields = append(p.fields, FieldError{Field: field, Message: message})
}

// AddPointer records a problem with the value at pointer inside field.
func (p *Problems) AddPointer(field, pointer, message string) {
	p.fields = append(p.fields, FieldError{Field: field, Pointer: pointer, Message: message})
}

// Merge adds the fields of a ValidationError under prefix.
func (p *Problems) Merge(prefix string, err *ValidationError) {
	for _, f := range err.Fields {
		name := f.Field
		if prefix != "" {
			name = prefix + "." + name
		}
		p.fields = append(p.fields, FieldError{Field: name, Message: f.Message})
	}
}

// Len is how many problems were recorded.
func (p *Problems) Len() int { return len(p.fields) }

// Err is nil when nothing was added, else a *ValidationError.
func (p *Problems) Err() error {
	if len(p.fields) == 0 {
		return nil
	}
	return &ValidationError{Fields: p.fields}
}

// IsNotFound reports whether err means something does not exist.
func IsNotFound(err error) bool { return errors.Is(err, ErrNotFound) }
